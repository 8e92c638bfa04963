// The LoRA op against a naive reference in double: each token's own adapter (or none), its
// update B (A x) scaled and added into its rows of the output; the stacks' padding is inert.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/detail/test_tensors.h"

namespace ib {
namespace {

using testing::random_floats;
using testing::TensorArena;

TEST(CpuLora, MixedSlotsMatchNaiveReference) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(5);
  // 6 tokens, 3 slots of rank R = 4 (slot 1 holds a rank-2 adapter, zero-padded), K = 13 in,
  // N = 7 out at rows [5, 12) of a 15-wide output.
  const int64_t t = 6, k = 13, s = 3, r = 4, n = 7, width = 15, offset = 5;
  std::vector<float> a = random_floats(rng, s * r * k);
  std::vector<float> b = random_floats(rng, s * n * r);
  for (int64_t j = 2; j < r; ++j) {  // slot 1: rank 2
    for (int64_t q = 0; q < k; ++q) a[static_cast<size_t>((1 * r + j) * k + q)] = 0.0f;
    for (int64_t m = 0; m < n; ++m) b[static_cast<size_t>((1 * n + m) * r + j)] = 0.0f;
  }
  const std::vector<float> x = random_floats(rng, t * k);
  const std::vector<float> out0 = random_floats(rng, t * width);
  const std::vector<float> scales = {0.5f, 2.0f, -1.25f};
  const std::vector<int32_t> ids = {2, -1, 0, 1, -1, 2};
  Tensor out = arena.f32({t, width}, out0);
  backend.lora_apply(arena.f32({t, k}, x), arena.i32({t}, ids), arena.f32({s, r, k}, a),
                     arena.f32({s, n, r}, b), arena.f32({s}, scales), offset, out);
  const std::vector<float> got = arena.to_host(out);
  for (int64_t i = 0; i < t; ++i) {
    const int32_t slot = ids[static_cast<size_t>(i)];
    for (int64_t c = 0; c < width; ++c) {
      double want = out0[static_cast<size_t>(i * width + c)];
      if (slot >= 0 && c >= offset && c < offset + n) {
        double update = 0;
        for (int64_t j = 0; j < r; ++j) {
          double u = 0;
          for (int64_t q = 0; q < k; ++q) {
            u += double{a[static_cast<size_t>((slot * r + j) * k + q)]} *
                 x[static_cast<size_t>(i * k + q)];
          }
          update += double{b[static_cast<size_t>((slot * n + (c - offset)) * r + j)]} * u;
        }
        want += scales[static_cast<size_t>(slot)] * update;
      }
      EXPECT_NEAR(got[static_cast<size_t>(i * width + c)], want, 1e-5)
          << "token " << i << " column " << c;
    }
  }
}

TEST(CpuLora, TokenResultDoesNotDependOnTheBatch) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(9);
  const int64_t k = 32, s = 2, r = 8, n = 24;
  const Tensor a = arena.f32({s, r, k}, random_floats(rng, s * r * k));
  const Tensor b = arena.f32({s, n, r}, random_floats(rng, s * n * r));
  const Tensor scales = arena.f32({s}, {1.0f, 0.25f});
  const std::vector<float> x = random_floats(rng, 5 * k);
  Tensor batch_out = arena.f32({5, n}, std::vector<float>(5 * n, 0.0f));
  backend.lora_apply(arena.f32({5, k}, x), arena.i32({5}, {1, 0, -1, 1, 0}), a, b, scales, 0,
                     batch_out);
  const std::vector<float> batched = arena.to_host(batch_out);
  // Token 3 (slot 1) alone gives the same bits.
  Tensor alone_out = arena.f32({1, n}, std::vector<float>(n, 0.0f));
  backend.lora_apply(arena.f32({1, k}, std::vector<float>(x.begin() + 3 * k, x.begin() + 4 * k)),
                     arena.i32({1}, {1}), a, b, scales, 0, alone_out);
  const std::vector<float> alone = arena.to_host(alone_out);
  for (int64_t c = 0; c < n; ++c)
    EXPECT_EQ(alone[static_cast<size_t>(c)], batched[static_cast<size_t>(3 * n + c)]);
  for (int64_t c = 0; c < n; ++c) EXPECT_EQ(batched[static_cast<size_t>(2 * n + c)], 0.0f);  // base
}

// The lookahead matrix (LoraOps::lora_lookahead_matrix) does what FusedLora::next_m promises:
// for an op out = res + x W^T + scale B (A x) (its matmul and its adapter's update, the ops
// themselves computing it), the next target's shrink a' . out equals m . x + a' . res.
TEST(CpuLora, LookaheadMatrixShrinksTheOutputAheadOfTheOp) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(9);
  const int64_t k = 24, n = 20, r = 4, r_next = 3;  // x (K), out (N), A (R, K), a' (R_next, N)
  const float scale = 1.5f;
  const std::vector<float> x = random_floats(rng, k), res = random_floats(rng, n);
  const std::vector<float> w = random_floats(rng, n * k), a = random_floats(rng, r * k);
  const std::vector<float> b = random_floats(rng, n * r), a_next = random_floats(rng, r_next * n);
  Tensor m = arena.f32({r_next, k}, std::vector<float>(static_cast<size_t>(r_next * k), 0.0f));
  backend.lora_lookahead_matrix(arena.f32({r_next, n}, a_next), arena.f32({n, k}, w),
                                arena.f32({r, k}, a), arena.f32({n, r}, b), scale, m);
  Tensor prod = arena.f32({1, n}, std::vector<float>(static_cast<size_t>(n), 0.0f));
  const Tensor xt = arena.f32({1, k}, x);
  backend.matmul(xt, arena.f32({n, k}, w), nullptr, prod);
  backend.lora_apply(xt, arena.i32({1}, {0}), arena.f32({1, r, k}, a), arena.f32({1, n, r}, b),
                     arena.f32({1}, {scale}), 0, prod);
  const std::vector<float> got_m = arena.to_host(m), p = arena.to_host(prod);
  for (int64_t i = 0; i < r_next; ++i) {
    double want = 0, got = 0;
    for (int64_t q = 0; q < n; ++q) {
      want += double{a_next[static_cast<size_t>(i * n + q)]} *
              (double{res[static_cast<size_t>(q)]} + p[static_cast<size_t>(q)]);
      got += double{a_next[static_cast<size_t>(i * n + q)]} * res[static_cast<size_t>(q)];
    }
    for (int64_t c = 0; c < k; ++c) {
      got += double{got_m[static_cast<size_t>(i * k + c)]} * x[static_cast<size_t>(c)];
    }
    EXPECT_NEAR(got, want, 1e-4 * (1.0 + std::abs(want))) << "row " << i;
  }
}

}  // namespace
}  // namespace ib
