// The decode GEMM (detail/gemv_kernel.cuh) at the configuration chosen by bench/gpu measurements
// on the H200: see bench/NOTES.md.
#include <algorithm>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/gemv_kernel.cuh"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace {

// Measured on the H200 against 5 other configurations (bench/NOTES.md, run 2): 8 warps with
// 2 interleaved steps in flight was fastest on every Llama-3-8B shape but one.
constexpr int kWarps = 8;
constexpr int kUnroll = 2;
constexpr bool kAdjacent = false;

template <typename T, typename TOut, int NT>
void launch_nt(const Tensor& x, const Tensor& w, const T* bias, Tensor out, cudaStream_t stream,
               bool pdl) {
  const int m = static_cast<int>(x.rows());
  const int n = static_cast<int>(w.dim(0));
  const int k = static_cast<int>(w.dim(1));
  const unsigned blocks = static_cast<unsigned>((n + kGemvRows - 1) / kGemvRows);
  launch_kernel("matmul(gemv)", pdl, gemv_kernel<T, TOut, NT, kWarps, kUnroll, kAdjacent>,
                dim3(blocks), dim3(kWarps * 32), 0, stream, x.as<T>(), w.as<T>(), bias,
                out.as<TOut>(), m, n, k);
}

template <typename T, typename TOut>
void launch_typed(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out,
                  cudaStream_t stream, bool pdl) {
  const T* b = bias ? bias->as<T>() : nullptr;
  const int64_t m = x.rows();
  if (m <= 8) {
    launch_nt<T, TOut, 1>(x, w, b, out, stream, pdl);
  } else if (m <= 16) {
    launch_nt<T, TOut, 2>(x, w, b, out, stream, pdl);
  } else {
    launch_nt<T, TOut, 4>(x, w, b, out, stream, pdl);
  }
}

}  // namespace

bool gemv_supported(const Tensor& x, const Tensor& w, const Tensor& out) {
  const bool half_type = x.dtype == DType::kBF16 || x.dtype == DType::kF16;
  return half_type && w.dtype == x.dtype && (out.dtype == x.dtype || out.dtype == DType::kF32) &&
         x.rows() >= 1 && x.rows() <= kGemvMaxM && w.dim(1) % kGemvStepK == 0 &&
         aligned16(x.data) && aligned16(w.data);
}

void launch_gemv(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out,
                 cudaStream_t stream, bool pdl) {
  IB_ASSERT(gemv_supported(x, w, out), "launch_gemv: operands the GEMV kernel cannot run");
  if (bias) IB_ASSERT(bias->dtype == w.dtype, "launch_gemv: bias dtype must match the weights");
  if (x.dtype == DType::kBF16) {
    if (out.dtype == DType::kF32) {
      launch_typed<bf16, float>(x, w, bias, out, stream, pdl);
    } else {
      launch_typed<bf16, bf16>(x, w, bias, out, stream, pdl);
    }
  } else {
    if (out.dtype == DType::kF32) {
      launch_typed<f16, float>(x, w, bias, out, stream, pdl);
    } else {
      launch_typed<f16, f16>(x, w, bias, out, stream, pdl);
    }
  }
}

}  // namespace ib::cuda
