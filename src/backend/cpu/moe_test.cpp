// The mixture-of-experts ops against hand-written references: the router (softmax in fp32, top-k,
// renormalised as transformers' Mixtral does) and the expert MLPs in double precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/detail/kernels.h"
#include "backend/cpu/detail/test_tensors.h"

namespace ib {
namespace {

using testing::random_floats;
using testing::TensorArena;

// The routing written out the long way, in double: every expert's probability, then a full sort.
void reference_route(const std::vector<float>& logits, int k, bool renormalize,
                     std::vector<int>& ids, std::vector<double>& weights) {
  const size_t e = logits.size();
  double mx = -1e300, sum = 0;
  for (float v : logits) mx = std::max(mx, double{v});
  std::vector<double> p(e);
  for (size_t i = 0; i < e; ++i) sum += (p[i] = std::exp(double{logits[i]} - mx));
  for (double& v : p) v /= sum;
  std::vector<int> order(e);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)];
  });
  ids.assign(order.begin(), order.begin() + k);
  double kept = 0;
  for (int id : ids) kept += p[static_cast<size_t>(id)];
  weights.clear();
  for (int id : ids) weights.push_back(p[static_cast<size_t>(id)] / (renormalize ? kept : 1.0));
}

TEST(CpuMoeRoute, HandComputedTopTwo) {
  // softmax(0, 1, 2, 3) = (0.0321, 0.0871, 0.2369, 0.6439); top-2 = (3, 2), renormalised
  // 0.6439 / 0.8808 = 0.7311, 0.2369 / 0.8808 = 0.2689 (= sigmoid(+-1)).
  const float logits[4] = {0.0f, 1.0f, 2.0f, 3.0f};
  int32_t ids[2];
  float w[2];
  cpu::route_token(logits, 4, 2, true, ids, w);
  EXPECT_EQ(ids[0], 3);
  EXPECT_EQ(ids[1], 2);
  EXPECT_NEAR(w[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(w[1], 1.0 / (1.0 + std::exp(1.0)), 1e-6);
  cpu::route_token(logits, 4, 2, false, ids, w);
  EXPECT_NEAR(w[0], std::exp(3.0) / (1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0)), 1e-6);
}

TEST(CpuMoeRoute, TiesPickTheLowerExpertFirst) {
  const float logits[5] = {0.5f, 2.0f, 0.5f, 2.0f, 2.0f};
  int32_t ids[3];
  float w[3];
  cpu::route_token(logits, 5, 3, true, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);
  EXPECT_EQ(ids[2], 4);
  for (float v : w) EXPECT_NEAR(v, 1.0 / 3.0, 1e-6);
}

TEST(CpuMoeRoute, MatchesReferenceAndCountsTokens) {
  CpuBackend backend(2);
  Rng rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    TensorArena arena(backend);
    const int64_t t = rng.uniform_int(1, 40), e = rng.uniform_int(2, 16);
    const int64_t k = rng.uniform_int(1, e);
    const bool renormalize = trial % 3 != 0;
    auto lv = random_floats(rng, t * e);
    for (float& v : lv) v *= 4.0f;  // logits spread over several units, as routers' are
    Tensor logits = arena.f32({t, e}, lv);
    Tensor ids = arena.empty(DType::kI32, {t, k});
    Tensor weights = arena.empty(DType::kF32, {t, k});
    Tensor counts = arena.i64({e}, std::vector<int64_t>(static_cast<size_t>(e), 7));
    backend.moe_route(logits, renormalize, ids, weights, counts);
    std::vector<int32_t> got_ids(static_cast<size_t>(t * k));
    std::vector<float> got_w(static_cast<size_t>(t * k));
    std::vector<int64_t> got_counts(static_cast<size_t>(e));
    backend.copy_to_host(ids, got_ids.data());
    backend.copy_to_host(weights, got_w.data());
    backend.copy_to_host(counts, got_counts.data());
    std::vector<int64_t> want_counts(static_cast<size_t>(e), 7);
    for (int64_t i = 0; i < t; ++i) {
      const std::vector<float> row(lv.begin() + i * e, lv.begin() + (i + 1) * e);
      std::vector<int> want_ids;
      std::vector<double> want_w;
      reference_route(row, static_cast<int>(k), renormalize, want_ids, want_w);
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) {
        const auto at = static_cast<size_t>(i * k + j);
        EXPECT_EQ(got_ids[at], want_ids[static_cast<size_t>(j)]) << "token " << i << " slot " << j;
        EXPECT_NEAR(got_w[at], want_w[static_cast<size_t>(j)], 1e-6);
        sum += got_w[at];
        ++want_counts[static_cast<size_t>(want_ids[static_cast<size_t>(j)])];
      }
      if (renormalize) {
        EXPECT_NEAR(sum, 1.0, 1e-6);
      }
    }
    EXPECT_EQ(got_counts, want_counts);
  }
}

// DeepSeek's shared experts as always-on experts (MoeRouting::always_on): rows of k + 2, the
// router's top-k as without them, then experts E and E + 1 at weight 1.0, neither scaled nor
// counted.
TEST(CpuMoeRoute, AlwaysOnExpertsFollowTheTopK) {
  CpuBackend backend(2);
  Rng rng(9);
  TensorArena arena(backend);
  const int64_t t = 11, e = 16, k = 4, on = 2;
  auto lv = random_floats(rng, t * e);
  for (float& v : lv) v *= 4.0f;
  MoeRouting routing;
  routing.renormalize = false;
  routing.scale = 2.5f;
  Tensor logits = arena.f32({t, e}, lv);
  Tensor plain_ids = arena.empty(DType::kI32, {t, k});
  Tensor plain_w = arena.empty(DType::kF32, {t, k});
  Tensor plain_counts = arena.i64({e}, std::vector<int64_t>(static_cast<size_t>(e), 0));
  backend.moe_route_grouped(logits, routing, plain_ids, plain_w, plain_counts);
  routing.always_on = on;
  Tensor ids = arena.empty(DType::kI32, {t, k + on});
  Tensor w = arena.empty(DType::kF32, {t, k + on});
  Tensor counts = arena.i64({e}, std::vector<int64_t>(static_cast<size_t>(e), 0));
  backend.moe_route_grouped(logits, routing, ids, w, counts);
  std::vector<int32_t> want_ids(static_cast<size_t>(t * k)),
      got_ids(static_cast<size_t>(t * (k + on)));
  std::vector<float> want_w(want_ids.size()), got_w(got_ids.size());
  std::vector<int64_t> want_counts(static_cast<size_t>(e)), got_counts(static_cast<size_t>(e));
  backend.copy_to_host(plain_ids, want_ids.data());
  backend.copy_to_host(plain_w, want_w.data());
  backend.copy_to_host(plain_counts, want_counts.data());
  backend.copy_to_host(ids, got_ids.data());
  backend.copy_to_host(w, got_w.data());
  backend.copy_to_host(counts, got_counts.data());
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < k + on; ++j) {
      const auto at = static_cast<size_t>(i * (k + on) + j);
      if (j < k) {
        EXPECT_EQ(got_ids[at], want_ids[static_cast<size_t>(i * k + j)]) << i << " " << j;
        EXPECT_EQ(got_w[at], want_w[static_cast<size_t>(i * k + j)]) << i << " " << j;
      } else {
        EXPECT_EQ(got_ids[at], e + j - k) << i << " " << j;
        EXPECT_EQ(got_w[at], 1.0f) << i << " " << j;
      }
    }
  }
  EXPECT_EQ(got_counts, want_counts);
}

TEST(CpuMoeExperts, MatchesDoubleReference) {
  CpuBackend backend(2);
  Rng rng(9);
  for (int trial = 0; trial < 8; ++trial) {
    TensorArena arena(backend);
    const int64_t t = rng.uniform_int(1, 12), d = rng.uniform_int(4, 40),
                  f = rng.uniform_int(2, 30), e = rng.uniform_int(2, 6);
    const int64_t k = std::min<int64_t>(2, e);
    const auto xv = random_floats(rng, t * d);
    Tensor x = arena.f32({t, d}, xv);
    std::vector<std::vector<float>> gu(static_cast<size_t>(e)), dn(static_cast<size_t>(e));
    std::vector<WeightRef> gate_up(static_cast<size_t>(e)), down(static_cast<size_t>(e));
    for (size_t i = 0; i < static_cast<size_t>(e); ++i) {
      gu[i] = random_floats(rng, 2 * f * d);
      dn[i] = random_floats(rng, d * f);
      gate_up[i].data = arena.f32({2 * f, d}, gu[i]);
      down[i].data = arena.f32({d, f}, dn[i]);
    }
    std::vector<int32_t> idv;
    std::vector<float> wv;
    for (int64_t i = 0; i < t; ++i) {
      const auto first = static_cast<int32_t>(rng.uniform_int(0, e - 1));
      idv.push_back(first);
      idv.push_back(static_cast<int32_t>((first + 1 + rng.uniform_int(0, e - 2)) % e));
      const float a = 0.5f + 0.5f * static_cast<float>(rng.uniform_int(0, 100)) / 100.0f;
      wv.push_back(a);
      wv.push_back(1.0f - a);
    }
    Tensor ids = arena.i32({t, k}, idv);
    Tensor weights = arena.f32({t, k}, wv);
    Tensor out = arena.empty(DType::kF32, {t, d});
    backend.moe_experts(x, ids, weights, gate_up, down, out);
    const auto got = arena.to_host(out);
    for (int64_t i = 0; i < t; ++i) {
      std::vector<double> want(static_cast<size_t>(d), 0.0);
      for (int64_t j = 0; j < k; ++j) {
        const auto ex = static_cast<size_t>(idv[static_cast<size_t>(i * k + j)]);
        std::vector<double> act(static_cast<size_t>(f));
        for (int64_t r = 0; r < f; ++r) {
          double g = 0, u = 0;
          for (int64_t c = 0; c < d; ++c) {
            const double xc = xv[static_cast<size_t>(i * d + c)];
            g += gu[ex][static_cast<size_t>(r * d + c)] * xc;
            u += gu[ex][static_cast<size_t>((f + r) * d + c)] * xc;
          }
          act[static_cast<size_t>(r)] = g / (1 + std::exp(-g)) * u;
        }
        for (int64_t c = 0; c < d; ++c) {
          double y = 0;
          for (int64_t r = 0; r < f; ++r)
            y += dn[ex][static_cast<size_t>(c * f + r)] * act[static_cast<size_t>(r)];
          want[static_cast<size_t>(c)] += wv[static_cast<size_t>(i * k + j)] * y;
        }
      }
      for (int64_t c = 0; c < d; ++c)
        EXPECT_NEAR(got[static_cast<size_t>(i * d + c)], want[static_cast<size_t>(c)], 1e-4)
            << "token " << i << " column " << c;
    }
  }
}

}  // namespace
}  // namespace ib
