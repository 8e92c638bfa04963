// cuBLASLt GEMMs for the prefill / large-batch path: out (M, N) = x (M, K) @ w (N, K)^T (+ bias),
// fp32 accumulation. The descriptors and the heuristic's algorithm are cached per shape, dtype
// and pointer alignment, so a decode step pays the heuristic only on its first call.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <unordered_map>
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
  };
  // a_scale, b_scale: an FP8 plan's outer-vector scales (device pointers), for the heuristic.
  Plan& plan_for(const Key& key, size_t workspace_bytes, const void* a_scale = nullptr,
                 const void* b_scale = nullptr);
  // One cublasLtMatmul on a plan (its scale pointers already set), then the bias where the
  // epilogue has none.
  void execute(Plan& plan, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out,
               void* workspace, size_t workspace_bytes, cudaStream_t stream, float beta);
  Key key_for(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) const;
  // The heuristic's top algorithms for a plan's descriptors (its epilogue already set).
  std::vector<cublasLtMatmulAlgo_t> candidates(const Plan& plan, const Key& key,
                                               size_t workspace_bytes, int count);

  cublasLtHandle_t handle_ = nullptr;
  std::unordered_map<Key, Plan, KeyHash> plans_;
};

}  // namespace ib::cuda
