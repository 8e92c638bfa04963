// cuBLASLt GEMMs for the prefill / large-batch path: out (M, N) = x (M, K) @ w (N, K)^T (+ bias),
// fp32 accumulation. The descriptors and the heuristic's algorithm are cached per shape, dtype
// and pointer alignment, so a decode step pays the heuristic only on its first call.
//
// Row buckets (IB_GEMM_M_BUCKETS=B, set_m_buckets): above kExactMaxM rows a plan serves every M
// up to its bucket (B buckets an octave: M rounded up to 2^e * (1 + j / B)), its algorithm the
// heuristic's at the bucket's M and its layouts set to each call's M. A continuous run's batch
// changes every step as sequences arrive and finish; with a plan per M the heuristic picks
// another of cuBLASLt's kernels at nearly every new M, and each one's first launch loads its
// module (lazy loading) while the device waits (~3 ms each in a timeline's tail: bench/NOTES.md,
// "Where the continuous run's device waits"). With buckets, the first call of a shape above
// kExactMaxM rows also launches every bucket's algorithm up to kPrewarmMaxM rows once, on the
// call's own x and a scratch output (set_prewarm_scratch), outside graph capture, so the modules
// load then. An algorithm that refuses a call's M falls back to that M's own plan. Off here (0);
// the backend factory's default is 4 (apply_cuda_switches).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/backend.h"

namespace ib::cuda {

class GemmLt {
 public:
  GemmLt();
  ~GemmLt();
  GemmLt(const GemmLt&) = delete;
  GemmLt& operator=(const GemmLt&) = delete;

  // workspace: device memory of workspace_bytes owned by the caller (tagged kWorkspace).
  // beta 1: out += x @ w^T (out is read as C), for a residual add without its own kernel.
  void run(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out, void* workspace,
           size_t workspace_bytes, cudaStream_t stream, float beta = 0.0f);
  // W8A8 FP8: out (M, N) = (xq (M, K) @ wq (N, K)^T) * x_scales[m] * w_scales[n] (+ bias), xq and
  // wq E4M3, both scales f32 outer vectors (cuBLASLt's OUTER_VEC_32F scale mode), out bf16/f16.
  void run_fp8(const Tensor& xq, const Tensor& x_scales, const Tensor& wq, const Tensor& w_scales,
               const Tensor* bias, Tensor out, void* workspace, size_t workspace_bytes,
               cudaStream_t stream);
  // INT8 W8A8's integer GEMM: acc (M, N) int32 = xq (M, K) @ wq (N, K)^T, exact (cuBLASLt's
  // CUBLAS_COMPUTE_32I); the scales are applied after (launch_dequantize_int32).
  void run_int8(const Tensor& xq, const Tensor& wq, Tensor acc, void* workspace,
                size_t workspace_bytes, cudaStream_t stream);
  // Times up to kTuneCandidates of the heuristic's algorithms on these operands and keeps the
  // fastest for their shape; returns its time in ms (infinity when none ran). time_ms runs its
  // argument a few times on the stream and returns ms per call (it synchronizes: never call
  // this during graph capture).
  static constexpr int kTuneCandidates = 8;
  using TimeFn = std::function<float(const std::function<void()>&)>;
  float tune(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out, void* workspace,
             size_t workspace_bytes, cudaStream_t stream, const TimeFn& time_ms);

  // Row buckets (above): per_octave 0 (a plan per M) or 1-16.
  void set_m_buckets(int per_octave);
  int m_buckets() const { return buckets_; }
  // The prewarm launches' output (device memory; null: no prewarm), and whether a graph capture
  // is in progress (no prewarm launches then).
  void set_prewarm_scratch(void* data, size_t bytes);
  void set_capturing(bool on) { capturing_ = on; }
  // Bucket tuning (IB_GEMM_TUNE=1): where a shape's buckets are prewarmed (its first call above
  // kExactMaxM rows, outside capture), each bucket's algorithm becomes the fastest of the
  // heuristic's first kTuneCandidates, each timed by time_ms at the bucket's own M on scratch
  // operands (x, and FP8's per-token scales: the call's rows repeated; out: scratch) with the
  // call's w (and its scales), bias, alpha and beta. The scratch (of the largest bucket tuned)
  // comes from acquire and goes back by release after the shape; buckets whose scratch would
  // pass kTuneScratchMaxBytes, or every bucket where acquire gives null, keep the heuristic's
  // first. nullopt: off.
  struct BucketTuning {
    TimeFn time_ms;
    std::function<void*(size_t bytes)> acquire;
    std::function<void()> release;
  };
  static constexpr size_t kTuneScratchMaxBytes = size_t{1} << 30;
  void set_bucket_tuning(std::optional<BucketTuning> tuning) { tuning_ = std::move(tuning); }
  bool bucket_tuning() const { return tuning_.has_value(); }
  // Buckets whose algorithm a tuning pass chose (the tests' view).
  size_t tuned_bucket_count() const { return tuned_buckets_; }
  // The smallest bucket holding m rows (m itself at or below kExactMaxM).
  static int64_t bucket_of(int64_t m, int per_octave);
  static constexpr int64_t kExactMaxM = 16;
  static constexpr int64_t kPrewarmMaxM = 16384;
  // Plans made so far, and the shapes prewarmed (the tests' view).
  size_t plan_count() const { return plans_.size(); }
  size_t prewarmed_count() const { return prewarmed_.size(); }

 private:
  struct Key {
    int64_t m, n, k;
    DType in, out;
    bool bias_epilogue;
    uint16_t align_x, align_w, align_out, align_bias;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool bias_epilogue = false;  // false with a bias: a separate bias-add kernel runs after
    int64_t layout_m = 0;        // the M its b and c layouts hold now
  };
  // One call's operands: cuBLASLt's A (w), B (x), C = D (out), alpha and beta of the compute
  // type, the bias (epilogue) and the FP8 scale pointers.
  struct Operands {
    const void* w;
    const void* x;
    void* out;
    const void* alpha;
    const void* beta;
    const void* bias;
    const void* a_scale;
    const void* b_scale;
  };
  // a_scale, b_scale: an FP8 plan's outer-vector scales (device pointers), for the heuristic.
  Plan& plan_for(const Key& key, size_t workspace_bytes, const void* a_scale = nullptr,
                 const void* b_scale = nullptr);
  // plan_for, or null where the heuristic finds no algorithm for the key.
  Plan* try_plan_for(const Key& key, size_t workspace_bytes, const void* a_scale,
                     const void* b_scale);
  static void destroy(Plan& plan);
  Key key_for(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) const;
  // cublasLtMatmul of a plan at m rows (its layouts set to m first), with algo (null: the
  // plan's).
  cublasStatus_t launch(Plan& plan, int64_t m, const Operands& op, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream,
                        const cublasLtMatmulAlgo_t* algo = nullptr);
  void set_layout_m(Plan& plan, int64_t m);
  // The plan a call of key's shape at key.m rows runs on (its bucket's, prewarming the shape
  // first; or key.m's own), launched; false where the bias epilogue is missing and the caller
  // must add the bias.
  bool matmul(const Key& key, const Operands& op, void* workspace, size_t workspace_bytes,
              cudaStream_t stream);
  void prewarm(const Key& key, const Operands& op, void* workspace, size_t workspace_bytes,
               cudaStream_t stream);
  // Bucket tuning (above) of key's shape; returns the largest bucket M it tuned (0: none).
  int64_t tune_buckets(const Key& key, const Operands& op, void* workspace, size_t workspace_bytes,
                       cudaStream_t stream);
  // The heuristic's top algorithms for a plan's descriptors (its epilogue already set).
  std::vector<cublasLtMatmulAlgo_t> candidates(const Plan& plan, const Key& key,
                                               size_t workspace_bytes, int count);

  cublasLtHandle_t handle_ = nullptr;
  std::unordered_map<Key, Plan, KeyHash> plans_;
  int buckets_ = 0;
  bool capturing_ = false;
  void* prewarm_out_ = nullptr;
  size_t prewarm_bytes_ = 0;
  std::unordered_set<Key, KeyHash> prewarmed_;   // shapes (m = 0)
  std::unordered_set<Key, KeyHash> exact_only_;  // (shape, m) whose bucket's algorithm refused m
  std::optional<BucketTuning> tuning_;
  size_t tuned_buckets_ = 0;
};

}  // namespace ib::cuda
