// cuBLASLt plans per row bucket (IB_GEMM_M_BUCKETS, detail/gemm_lt.h): the bucket arithmetic;
// matmuls at row counts inside and across buckets against the CPU oracle (bf16, f16, with a
// bias, f32 output, and the residual add with beta = 1, which the prewarm launches must leave
// alone); no plan made after a shape's first call (the prewarm made every bucket's up to
// kPrewarmMaxM rows); none during a graph capture; W8A8's FP8 and INT8 GEMMs equal to the same
// GEMMs with a plan per row count (INT8 bit for bit: int32 sums; FP8 within bf16's tolerance:
// another algorithm may sum in another order), with the heuristic's algorithms and timed ones;
// the buckets' algorithms timed at their own M (IB_GEMM_TUNE) against the CPU oracle.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/detail/gemm_lt.h"
#include "backend/cuda/detail/gemv_test_support.h"
#include "backend/cuda/detail/test_support.h"

namespace ib::cuda {
namespace {

using testing::Pair;
using testing::random_floats;
using testing::rel_l2;
using testing::tolerance;
using testing::Twin;

// x (m, k) at random through w and b on both backends, compared.
void expect_bias_matmul(Twin& twin, Rng& rng, const Pair& w, const Pair& b, int64_t m) {
  const int64_t n = w.cpu.dim(0), k = w.cpu.dim(1);
  const Pair x = twin.floats({m, k}, random_floats(rng, m * k));
  Pair out = twin.output({m, n});
  twin.cpu().matmul(x.cpu, w.cpu, &b.cpu, out.cpu);
  twin.gpu().matmul(x.gpu, w.gpu, &b.gpu, out.gpu);
  EXPECT_LT(twin.error(out), tolerance(twin.dtype())) << "m=" << m;
}

// x (70, k) at random through w, no bias, into f32 output on both backends, compared; returns x.
Pair expect_f32_out_matmul(Twin& twin, Rng& rng, const Pair& w) {
  const int64_t n = w.cpu.dim(0), k = w.cpu.dim(1);
  const Pair x = twin.floats({70, k}, random_floats(rng, 70 * k));
  Pair out = twin.output({70, n}, DType::kF32);
  twin.cpu().matmul(x.cpu, w.cpu, nullptr, out.cpu);
  twin.gpu().matmul(x.gpu, w.gpu, nullptr, out.gpu);
  EXPECT_LT(twin.error(out), tolerance(twin.dtype())) << "f32 out";
  return x;
}

TEST(GemmBuckets, RowCountsRoundUpWithinTheirOctave) {
  EXPECT_EQ(GemmLt::bucket_of(16, 4), 16);  // the tuned row counts keep their own plans
  EXPECT_EQ(GemmLt::bucket_of(17, 4), 20);
  EXPECT_EQ(GemmLt::bucket_of(20, 4), 20);
  EXPECT_EQ(GemmLt::bucket_of(21, 4), 24);
  EXPECT_EQ(GemmLt::bucket_of(600, 4), 640);
  EXPECT_EQ(GemmLt::bucket_of(1000, 4), 1024);
  EXPECT_EQ(GemmLt::bucket_of(1024, 4), 1024);
  EXPECT_EQ(GemmLt::bucket_of(1025, 4), 1280);
  EXPECT_EQ(GemmLt::bucket_of(1025, 1), 2048);
  EXPECT_EQ(GemmLt::bucket_of(12500, 16), 12800);
  EXPECT_EQ(GemmLt::bucket_of(1000, 0), 1000);  // off: a plan per row count
  for (const int b : {1, 2, 4, 8, 16}) {
    for (int64_t m = 17; m < 5000; m += 7) {
      const int64_t bucket = GemmLt::bucket_of(m, b);
      EXPECT_GE(bucket, m);
      EXPECT_EQ(GemmLt::bucket_of(bucket, b), bucket) << m;  // a bucket is its own
      EXPECT_LE(bucket, m * 2) << m;
    }
  }
}

class CudaGemmBuckets : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { IB_REQUIRE_CUDA(); }
};

TEST_P(CudaGemmBuckets, MatchTheCpuAndMakeNoPlanAfterTheFirstCall) {
  Twin twin(GetParam());
  Rng rng(41);
  twin.gpu().set_gemv_max_m(0);  // cuBLASLt at every row count
  twin.gpu().set_gemm_m_buckets(4);
  const int64_t n = 384, k = 512;
  const float a = 1.0f / std::sqrt(static_cast<float>(k));
  const Pair w = twin.floats({n, k}, random_floats(rng, n * k, -a, a));
  const Pair b = twin.floats({n}, random_floats(rng, n, -0.5f, 0.5f));
  size_t plans = 0;
  for (const int64_t m : {40, 17, 33, 100, 257, 1000, 41}) {
    expect_bias_matmul(twin, rng, w, b, m);
    if (m == 40) {
      plans = twin.gpu().gemm().plan_count();
      EXPECT_EQ(twin.gpu().gemm().prewarmed_count(), 1u);
      EXPECT_GT(plans, 10u) << "the prewarm makes every bucket's plan up to kPrewarmMaxM rows";
    } else {
      EXPECT_EQ(twin.gpu().gemm().plan_count(), plans) << "a plan made mid-run at m=" << m;
    }
  }
  // f32 output, no bias: another shape, prewarmed on its first call.
  expect_f32_out_matmul(twin, rng, w);
  EXPECT_EQ(twin.gpu().gemm().prewarmed_count(), 2u);
}

// The residual add (beta = 1): the prewarm of its shape writes its scratch, not the residual.
TEST_P(CudaGemmBuckets, LeaveTheResidualToTheAdd) {
  Twin twin(GetParam());
  Rng rng(42);
  twin.gpu().set_gemv_max_m(0);
  twin.gpu().set_add_with_cublaslt(true);
  twin.gpu().set_gemm_m_buckets(4);
  const int64_t n = 256, k = 320;
  const float a = 1.0f / std::sqrt(static_cast<float>(k));
  const Pair wp = twin.floats({n, k}, random_floats(rng, n * k, -a, a));
  const testing::WeightPair w{wp.cpu, wp.gpu};
  for (const int64_t m : {48, 90}) {
    const Pair x = twin.floats({m, k}, random_floats(rng, m * k));
    const size_t before = twin.gpu().gemm().prewarmed_count();
    testing::expect_matmul_add(twin, rng, x, w, "bucketed m=" + std::to_string(m));
    EXPECT_EQ(twin.gpu().gemm().prewarmed_count(), m == 48 ? before + 1 : before);
  }
}

// A shape first seen inside a graph capture is not prewarmed there (its launches would enter the
// graph); the graph's replay is still right, and the next eager call prewarms it.
TEST_P(CudaGemmBuckets, NoPrewarmInsideACapture) {
  Twin twin(GetParam());
  Rng rng(43);
  twin.gpu().set_gemv_max_m(0);
  twin.gpu().set_gemm_m_buckets(4);
  const int64_t m = 64, n = 192, k = 256;
  const Pair w = twin.floats({n, k}, random_floats(rng, n * k, -0.06f, 0.06f));
  const Pair x = twin.floats({m, k}, random_floats(rng, m * k));
  Pair out = twin.output({m, n});
  twin.cpu().matmul(x.cpu, w.cpu, nullptr, out.cpu);
  testing::replay_in_graph(twin, [&] { twin.gpu().matmul(x.gpu, w.gpu, nullptr, out.gpu); });
  EXPECT_LT(twin.error(out), tolerance(GetParam())) << "replayed";
  EXPECT_EQ(twin.gpu().gemm().prewarmed_count(), 0u);
  twin.gpu().matmul(x.gpu, w.gpu, nullptr, out.gpu);
  EXPECT_EQ(twin.gpu().gemm().prewarmed_count(), 1u);
  EXPECT_LT(twin.error(out), tolerance(GetParam())) << "eager";
}

// IB_GEMM_TUNE: the buckets' algorithms chosen by timing at their own M, on the shape's first
// call, on scratch operands: every bucket up to kPrewarmMaxM is tuned (this shape's scratch is
// small), the products still match the CPU at row counts across buckets, with a bias, with f32
// output and as the residual add (the tuning runs write the scratch, not the residual), no plan is
// made after the first call, and a graph replay of a tuned plan is right.
TEST_P(CudaGemmBuckets, TunedBucketsMatchTheCpu) {
  Twin twin(GetParam());
  Rng rng(45);
  twin.gpu().set_gemv_max_m(0);
  twin.gpu().set_add_with_cublaslt(true);
  twin.gpu().set_gemm_m_buckets(4);
  twin.gpu().set_gemm_tuning(true);
  ASSERT_TRUE(twin.gpu().gemm_tuning());
  const int64_t n = 384, k = 512;
  const float a = 1.0f / std::sqrt(static_cast<float>(k));
  const Pair w = twin.floats({n, k}, random_floats(rng, n * k, -a, a));
  const Pair b = twin.floats({n}, random_floats(rng, n, -0.5f, 0.5f));
  size_t plans = 0, tuned = 0;
  for (const int64_t m : {40, 17, 100, 257, 1000, 3000}) {
    expect_bias_matmul(twin, rng, w, b, m);
    if (m == 40) {
      plans = twin.gpu().gemm().plan_count();
      tuned = twin.gpu().gemm().tuned_bucket_count();
      int64_t buckets = 0;
      for (int64_t r = GemmLt::bucket_of(GemmLt::kExactMaxM + 1, 4); r <= GemmLt::kPrewarmMaxM;
           r = GemmLt::bucket_of(r + 1, 4))
        ++buckets;
      EXPECT_EQ(tuned, static_cast<size_t>(buckets)) << "every bucket of the shape tuned";
    } else {
      EXPECT_EQ(twin.gpu().gemm().plan_count(), plans) << "a plan made mid-run at m=" << m;
      EXPECT_EQ(twin.gpu().gemm().tuned_bucket_count(), tuned) << "tuned again at m=" << m;
    }
  }
  // f32 output (another shape, tuned on its first call), then its graph replay.
  const Pair x = expect_f32_out_matmul(twin, rng, w);
  EXPECT_GT(twin.gpu().gemm().tuned_bucket_count(), tuned);
  Pair replayed = twin.output({70, n}, DType::kF32);
  twin.cpu().matmul(x.cpu, w.cpu, nullptr, replayed.cpu);
  testing::replay_in_graph(twin, [&] { twin.gpu().matmul(x.gpu, w.gpu, nullptr, replayed.gpu); });
  EXPECT_LT(twin.error(replayed), tolerance(GetParam())) << "replayed";
  // The residual add (beta = 1) of a third shape, tuned on its first call.
  const Pair wp = twin.floats({256, k}, random_floats(rng, 256 * k, -a, a));
  const testing::WeightPair wa{wp.cpu, wp.gpu};
  for (const int64_t m : {48, 90}) {
    const Pair xa = twin.floats({m, k}, random_floats(rng, m * k));
    testing::expect_matmul_add(twin, rng, xa, wa, "tuned m=" + std::to_string(m));
  }
  ASSERT_TRUE(twin.gpu().device_status().ok());
}

// W8A8 above the GEMV's rows: cuBLASLt's E4M3 GEMM with outer-vector scales and the INT8 GEMM,
// bucketed against a plan per row count on the same weights and x: the buckets with the
// heuristic's algorithms, then (IB_GEMM_TUNE, a fresh backend: a shape is prewarmed once) with
// timed ones, whose FP8 tuning runs on scratch per-token scales.
TEST_P(CudaGemmBuckets, W8A8GemmsMatchAPlanPerRowCount) {
  for (const bool tuned : {false, true}) {
    Twin twin(GetParam());
    twin.gpu().set_gemm_tuning(tuned);
    for (const WeightFormat format : {WeightFormat::kFp8E4M3, WeightFormat::kInt8W8A8}) {
      if (!twin.gpu().supports_weight_format(format)) continue;
      Rng rng(44);
      const int64_t n = 512, k = 1024;
      const WeightRef w = testing::quantize(twin, rng, n, k, format);
      const size_t tuned_before = twin.gpu().gemm().tuned_bucket_count();
      for (const int64_t m : {100, 300}) {
        const Pair x = twin.floats({m, k}, random_floats(rng, m * k));
        Pair out = twin.output({m, n});
        twin.gpu().set_gemm_m_buckets(0);
        twin.gpu().matmul(x.gpu, w, nullptr, out.gpu);
        const std::vector<float> want = twin.gpu_floats(out.gpu);
        twin.gpu().set_gemm_m_buckets(4);
        twin.gpu().matmul(x.gpu, w, nullptr, out.gpu);
        ASSERT_TRUE(twin.gpu().device_status().ok());
        const std::vector<float> got = twin.gpu_floats(out.gpu);
        const std::string what = std::string(weight_format_name(format)) +
                                 " m=" + std::to_string(m) + (tuned ? " tuned" : "");
        if (format == WeightFormat::kInt8W8A8) {
          EXPECT_EQ(got, want) << what;
        } else {
          EXPECT_LT(rel_l2(got, want), tolerance(GetParam())) << what;
        }
      }
      EXPECT_EQ(twin.gpu().gemm().tuned_bucket_count() > tuned_before, tuned)
          << weight_format_name(format);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaGemmBuckets, ::testing::Values(DType::kBF16, DType::kF16),
                         testing::dtype_param_name);

}  // namespace
}  // namespace ib::cuda
