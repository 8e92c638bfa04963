// The lookahead shrink's launcher (launch_lora_lookahead, detail/lora_kernels.h; IB_LORA_IN_GEMV=5)
// against sums in double on the host of the same rounded values: the op's own rows
// u[t] = a_g[s] . x[t] and the next op's u_next[t] = m_g[s] . x[t] + a'_g[s] . x2[t]. Batches of
// one adapter for every token, a distinct adapter a token, and slots mixed with -1 (the base);
// K 1,152 and 9,000, K2 640 and 4,096; fp32, bf16 and fp16. Stated tolerance: 2e-5 relative
// L2 per token and group (fp32 sums of the same products), the rows of base tokens left as they
// were, and the same bits on a second launch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/detail/lora_kernels.h"
#include "backend/cuda/detail/test_support.h"

namespace ib::cuda {
namespace {

using testing::Pair;
using testing::random_floats;
using testing::Twin;

class CudaLoraLookahead : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { IB_REQUIRE_CUDA(); }
};

struct LookCase {
  const char* name;
  int64_t k, k2, slots;
  std::vector<int32_t> ids;  // a slot per token
};

// The host's sums in double: out[t][g R + r] = sum_c a_g[s][r][c] x[t][c] (+ a2 over x2).
std::vector<double> host_sums(const std::vector<std::vector<float>>& a, const std::vector<float>& x,
                              int64_t k, const std::vector<std::vector<float>>* a2,
                              const std::vector<float>* x2, int64_t k2,
                              const std::vector<int32_t>& ids, int64_t rank) {
  const auto t = static_cast<int64_t>(ids.size());
  const auto count = static_cast<int64_t>(a.size());
  std::vector<double> out(static_cast<size_t>(t * count * rank), 0.0);
  for (int64_t i = 0; i < t; ++i) {
    const int32_t s = ids[static_cast<size_t>(i)];
    if (s < 0) continue;
    for (int64_t g = 0; g < count; ++g) {
      for (int64_t r = 0; r < rank; ++r) {
        double sum = 0.0;
        const size_t row = static_cast<size_t>((s * rank + r) * k);
        for (int64_t c = 0; c < k; ++c) {
          sum += static_cast<double>(a[static_cast<size_t>(g)][row + static_cast<size_t>(c)]) *
                 x[static_cast<size_t>(i * k + c)];
        }
        if (a2 != nullptr) {
          const size_t row2 = static_cast<size_t>((s * rank + r) * k2);
          for (int64_t c = 0; c < k2; ++c) {
            sum +=
                static_cast<double>((*a2)[static_cast<size_t>(g)][row2 + static_cast<size_t>(c)]) *
                (*x2)[static_cast<size_t>(i * k2 + c)];
          }
        }
        out[static_cast<size_t>((i * count + g) * rank + r)] = sum;
      }
    }
  }
  return out;
}

TEST_P(CudaLoraLookahead, GivesEveryTokensSums) {
  Twin twin(GetParam());
  const int64_t rank = 16, cur_count = 1, next_count = 3;
  const std::vector<LookCase> cases = {
      {"one adapter, 8 tokens", 1152, 640, 3, {2, 2, 2, 2, 2, 2, 2, 2}},
      {"a slot a token", 1152, 640, 8, {0, 1, 2, 3, 4, 5, 6, 7}},
      {"mixed with the base", 9000, 4096, 3, {-1, 0, 1, 2, -1, 0, 1}},
      {"one token", 9000, 4096, 3, {1}},
      {"one adapter among base tokens, long K", 9000, 4096, 3, {-1, -1, 0, -1, 0}},
  };
  Rng rng(71);
  for (const LookCase& c : cases) {
    const auto t = static_cast<int64_t>(c.ids.size());
    const int64_t s = c.slots, k = c.k, k2 = c.k2;
    const auto ak = static_cast<float>(1.7 / std::sqrt(static_cast<double>(k)));
    Pair x = twin.floats({t, k}, random_floats(rng, t * k, -2.0f, 2.0f));
    Pair x2 = twin.floats({t, k2}, random_floats(rng, t * k2, -2.0f, 2.0f));
    const auto stacks = [&](int64_t count, int64_t kk) {
      std::vector<Pair> out;
      for (int64_t g = 0; g < count; ++g)
        out.push_back(twin.floats({s, rank, kk}, random_floats(rng, s * rank * kk, -ak, ak)));
      return out;
    };
    const std::vector<Pair> a = stacks(cur_count, k), m = stacks(next_count, k),
                            a2 = stacks(next_count, k2);
    const Pair ids = twin.ints<int32_t>({t}, c.ids);
    const auto host = [&](const std::vector<Pair>& p) {
      std::vector<std::vector<float>> v;
      for (const Pair& q : p) v.push_back(twin.cpu_floats(q.cpu));
      return v;
    };
    const std::vector<float> xh = twin.cpu_floats(x.cpu), x2h = twin.cpu_floats(x2.cpu);
    const auto a2h = host(a2);
    const std::vector<double> want_u = host_sums(host(a), xh, k, nullptr, nullptr, 0, c.ids, rank);
    const std::vector<double> want_next = host_sums(host(m), xh, k, &a2h, &x2h, k2, c.ids, rank);
    const auto ptrs = [](const std::vector<Pair>& p) {
      LoraGroupPtrs g;
      for (size_t i = 0; i < p.size(); ++i) g.a[i] = p[i].gpu.data;
      g.count = static_cast<int>(p.size());
      return g;
    };
    std::vector<float> first_u;  // the first launch's u and u_next
    std::vector<float> first_next;
    for (int launch = 0; launch < 2; ++launch) {
      const std::string at = std::string(c.name) + " launch " + std::to_string(launch);
      Pair u = twin.output({t, cur_count * rank}, DType::kF32);
      Pair u_next = twin.output({t, next_count * rank}, DType::kF32);
      launch_lora_lookahead(x.gpu, ids.gpu, ptrs(a), ptrs(m), x2.gpu, ptrs(a2), rank, s,
                            u.gpu.as<float>(), u_next.gpu.as<float>(), twin.gpu().stream(),
                            /*pdl=*/false);
      twin.gpu().synchronize();
      ASSERT_TRUE(twin.gpu().device_status().ok()) << at;
      const std::vector<float> got_u = twin.gpu_floats(u.gpu);
      const std::vector<float> got_next = twin.gpu_floats(u_next.gpu);
      const auto check = [&](const std::vector<float>& got, const std::vector<double>& want,
                             int64_t width, const char* what) {
        for (int64_t i = 0; i < t; ++i) {
          std::vector<float> g(got.begin() + i * width, got.begin() + (i + 1) * width);
          if (c.ids[static_cast<size_t>(i)] < 0) {  // left unwritten: the NaN poison
            for (const float v : g) EXPECT_TRUE(std::isnan(v)) << at << " " << what << " t " << i;
            continue;
          }
          std::vector<float> w;
          for (int64_t e = 0; e < width; ++e)
            w.push_back(static_cast<float>(want[static_cast<size_t>(i * width + e)]));
          EXPECT_LT(testing::rel_l2(g, w), 2e-5) << at << " " << what << " t " << i;
        }
      };
      check(got_u, want_u, cur_count * rank, "u");
      check(got_next, want_next, next_count * rank, "u_next");
      if (launch == 0) {
        first_u = got_u;
        first_next = got_next;
      } else {  // the same bits (NaN != NaN: compared as bytes)
        EXPECT_EQ(std::memcmp(first_u.data(), got_u.data(), got_u.size() * sizeof(float)), 0)
            << at << " u bits";
        EXPECT_EQ(std::memcmp(first_next.data(), got_next.data(), got_next.size() * sizeof(float)),
                  0)
            << at << " u_next bits";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaLoraLookahead,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         testing::dtype_param_name);

}  // namespace
}  // namespace ib::cuda
