// GPU sampling against the CPU reference: greedy must agree exactly (lowest index on ties);
// stochastic sampling must reproduce with a seed, agree with the CPU's inverse-CDF draw on the
// same uniforms, and follow the softmax / top-k / top-p distribution.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/detail/test_support.h"

namespace ib::cuda {
namespace {

using testing::Pair;
using testing::random_floats;
using testing::Twin;

struct RowParams {
  float temperature = 0;
  int32_t top_k = 0;
  float top_p = 1;
  int64_t seed = 0;
  int32_t step = 0;
};

// Samples rows of logits on both backends; returns {cpu tokens, gpu tokens}.
std::pair<std::vector<int32_t>, std::vector<int32_t>> sample_both(Twin& twin,
                                                                  const std::vector<float>& logits,
                                                                  int64_t vocab,
                                                                  const std::vector<RowParams>& p,
                                                                  bool all_greedy) {
  const auto rows = static_cast<int64_t>(p.size());
  std::vector<float> temperature, top_p;
  std::vector<int32_t> top_k, step;
  std::vector<int64_t> seed;
  for (const auto& r : p) {
    temperature.push_back(r.temperature);
    top_k.push_back(r.top_k);
    top_p.push_back(r.top_p);
    seed.push_back(r.seed);
    step.push_back(r.step);
  }
  Pair l = twin.floats({rows, vocab}, logits, DType::kF32);
  Pair t = twin.floats({rows}, temperature, DType::kF32);
  Pair tp = twin.floats({rows}, top_p, DType::kF32);
  Pair tk = twin.ints({rows}, top_k);
  Pair sd = twin.ints({rows}, seed);
  Pair st = twin.ints({rows}, step);
  Pair out = twin.output_i32({rows});
  const auto meta = [&](bool gpu) {
    SamplingMetadata m;
    m.num_rows = static_cast<int>(rows);
    m.all_greedy = all_greedy;
    m.temperature = gpu ? t.gpu : t.cpu;
    m.top_k = gpu ? tk.gpu : tk.cpu;
    m.top_p = gpu ? tp.gpu : tp.cpu;
    m.seed = gpu ? sd.gpu : sd.cpu;
    m.step = gpu ? st.gpu : st.cpu;
    return m;
  };
  twin.cpu().sample(l.cpu, meta(false), out.cpu);
  twin.gpu().sample(l.gpu, meta(true), out.gpu);
  return {twin.host_ints<int32_t>(twin.cpu(), out.cpu),
          twin.host_ints<int32_t>(twin.gpu(), out.gpu)};
}

class CudaSampling : public ::testing::Test {
 protected:
  void SetUp() override { IB_REQUIRE_CUDA(); }
};

TEST_F(CudaSampling, GreedyMatchesCpuWithTiesToLowestIndex) {
  Twin twin(DType::kBF16);
  Rng rng(21);
  for (const int64_t vocab : {1000, 128256}) {
    const int64_t rows = 37;
    auto logits = random_floats(rng, rows * vocab, -20, 20);
    // Half the rows get their maximum twice: the lower index must win.
    for (int64_t r = 0; r < rows; r += 2) {
      const auto a = rng.uniform_int(0, vocab / 2), b = rng.uniform_int(vocab / 2 + 1, vocab - 1);
      logits[static_cast<size_t>(r * vocab + a)] = 25.0f;
      logits[static_cast<size_t>(r * vocab + b)] = 25.0f;
    }
    std::vector<RowParams> p(static_cast<size_t>(rows));
    for (const bool all_greedy : {true, false}) {
      const auto [cpu, gpu] = sample_both(twin, logits, vocab, p, all_greedy);
      EXPECT_EQ(cpu, gpu) << "vocab " << vocab << " all_greedy " << all_greedy;
    }
  }
}

TEST_F(CudaSampling, StochasticAgreesWithCpuAndReproduces) {
  Twin twin(DType::kBF16);
  Rng rng(22);
  for (const int64_t vocab : {1000, 32000, 128256}) {
    const int64_t rows = 96;
    const auto logits = random_floats(rng, rows * vocab, -8, 8);
    std::vector<RowParams> p(static_cast<size_t>(rows));
    const float temps[] = {0.6f, 1.0f, 1.7f};
    const int32_t ks[] = {0, 1, 7, 50};
    const float ps[] = {1.0f, 0.9f, 0.35f};
    for (size_t r = 0; r < p.size(); ++r) {
      p[r] = {temps[r % 3], ks[(r / 3) % 4], ps[(r / 12) % 3],
              static_cast<int64_t>(rng.next_u64() >> 1), static_cast<int32_t>(r * 13)};
    }
    p[5].temperature = 0;  // a greedy row inside a stochastic batch
    const auto [cpu, gpu] = sample_both(twin, logits, vocab, p, false);
    int agree = 0;
    for (size_t r = 0; r < cpu.size(); ++r) agree += cpu[r] == gpu[r];
    // Fixed-point masses can differ from the CPU's double sums only at a cut-point boundary.
    EXPECT_GE(agree, static_cast<int>(rows) - 1) << "vocab " << vocab;
    EXPECT_EQ(cpu[5], gpu[5]);
    const auto [cpu2, gpu2] = sample_both(twin, logits, vocab, p, false);
    EXPECT_EQ(gpu, gpu2) << "the same seeds must give the same tokens";
  }
}

TEST_F(CudaSampling, FollowsTheSoftmaxTopKAndTopPDistribution) {
  Twin twin(DType::kBF16);
  const std::vector<float> base = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -3.0f};
  const auto vocab = static_cast<int64_t>(base.size());
  const int64_t rows = 20000;
  std::vector<float> logits;
  for (int64_t r = 0; r < rows; ++r) logits.insert(logits.end(), base.begin(), base.end());
  struct Case {
    float temperature;
    int32_t top_k;
    float top_p;
  };
  for (const Case c : {Case{1.0f, 0, 1.0f}, Case{0.7f, 3, 1.0f}, Case{1.3f, 0, 0.6f}}) {
    // Expected: softmax(l / T) over the top-k, cut to the top-p prefix, renormalised.
    std::vector<double> prob(base.size());
    double z = 0;
    for (size_t i = 0; i < base.size(); ++i) z += prob[i] = std::exp(base[i] / c.temperature);
    const size_t k = c.top_k > 0 ? static_cast<size_t>(c.top_k) : base.size();
    double kept = 0;
    for (size_t i = 0; i < k; ++i) kept += prob[i];
    size_t nucleus = 0;
    double mass = 0;
    while (nucleus < k && (nucleus == 0 || mass < c.top_p * kept)) mass += prob[nucleus++];
    std::vector<RowParams> p(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      p[static_cast<size_t>(r)] = {c.temperature, c.top_k, c.top_p, 99, static_cast<int32_t>(r)};
    const auto [cpu, gpu] = sample_both(twin, logits, vocab, p, false);
    std::vector<int64_t> counts(base.size(), 0);
    for (int32_t tok : gpu) {
      ASSERT_GE(tok, 0);
      ASSERT_LT(tok, vocab);
      ++counts[static_cast<size_t>(tok)];
    }
    for (size_t i = 0; i < base.size(); ++i) {
      const double want = i < nucleus ? prob[i] / mass : 0.0;
      const double got = static_cast<double>(counts[i]) / static_cast<double>(rows);
      const double sigma = std::sqrt(want * (1 - want) / static_cast<double>(rows));
      EXPECT_NEAR(got, want, 5 * sigma + 1e-9)
          << "token " << i << " T=" << c.temperature << " k=" << c.top_k << " p=" << c.top_p;
    }
  }
}

}  // namespace
}  // namespace ib::cuda
