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
                out.as<TOut>(), m, n, k, 0.0f, GemvRopeCache{});
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

// The fused decode variants, M <= 8 (one n-tile).
template <typename T, int kEpilogue, bool kRms>
void launch_fused_typed(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out, float eps,
                        cudaStream_t stream, bool pdl, const GemvRopeCache& rc = {}) {
  const int m = static_cast<int>(x.rows());
  const int n = static_cast<int>(w.dim(0));
  const int k = static_cast<int>(w.dim(1));
  const int rows_per_block = kEpilogue == kGemvSwiGlu ? kGemvRows / 2 : kGemvRows;
  const int features = kEpilogue == kGemvSwiGlu ? n / 2 : n;
  const unsigned blocks = static_cast<unsigned>((features + rows_per_block - 1) / rows_per_block);
  launch_kernel("matmul(gemv, fused)", pdl,
                gemv_kernel<T, T, 1, kWarps, kUnroll, kAdjacent, kEpilogue, kRms>, dim3(blocks),
                dim3(kWarps * 32), 0, stream, x.as<T>(), w.as<T>(), bias ? bias->as<T>() : nullptr,
                out.as<T>(), m, n, k, eps, rc);
}

template <typename T>
void launch_fused(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out,
                  GemvFusion fusion, float eps, cudaStream_t stream, bool pdl) {
  switch (fusion) {
    case GemvFusion::kRmsSwiGlu:
      return launch_fused_typed<T, kGemvSwiGlu, true>(x, w, bias, out, eps, stream, pdl);
    case GemvFusion::kAccumulate:
      return launch_fused_typed<T, kGemvAccumulate, false>(x, w, bias, out, eps, stream, pdl);
  }
}

}  // namespace

void launch_gemv_rope_cache(const Tensor& x, const Tensor& w, const Tensor* bias, float eps,
                            const Tensor& positions, const Tensor& slot_mapping,
                            const Tensor& inv_freq, const KvCacheLayer& kv,
                            const AttentionShape& shape, Tensor qkv, cudaStream_t stream,
                            bool pdl) {
  IB_ASSERT(gemv_rope_cache_supported(x, w, shape), "launch_gemv_rope_cache: unsupported operands");
  IB_ASSERT(qkv.dtype == x.dtype && kv.k.dtype == x.dtype && kv.v.dtype == x.dtype,
            "launch_gemv_rope_cache: qkv and the cache must have x's dtype");
  GemvRopeCache rc;
  rc.positions = positions.as<int32_t>();
  rc.slot_mapping = slot_mapping.as<int32_t>();
  rc.inv_freq = inv_freq.as<float>();
  rc.k_cache = kv.k.data;
  rc.v_cache = kv.v.data;
  rc.num_heads = shape.num_heads;
  rc.num_kv_heads = shape.num_kv_heads;
  rc.head_dim = shape.head_dim;
  rc.block_size = kv.block_size;
  if (x.dtype == DType::kBF16) {
    launch_fused_typed<bf16, kGemvRopeCache, true>(x, w, bias, qkv, eps, stream, pdl, rc);
  } else {
    launch_fused_typed<f16, kGemvRopeCache, true>(x, w, bias, qkv, eps, stream, pdl, rc);
  }
}

bool gemv_rope_cache_supported(const Tensor& x, const Tensor& w, const AttentionShape& shape) {
  return gemv_fused_supported(x, w, GemvFusion::kAccumulate) && shape.head_dim % kGemvRows == 0 &&
         w.dim(0) == int64_t{shape.num_heads + 2 * shape.num_kv_heads} * shape.head_dim;
}

bool gemv_fused_shapes_fit(const AttentionShape& shape, int64_t hidden_size,
                           int64_t intermediate_size) {
  const int64_t q = int64_t{shape.num_heads} * shape.head_dim;
  return hidden_size % kGemvStepK == 0 && intermediate_size % kGemvStepK == 0 &&
         q % kGemvStepK == 0 && shape.head_dim % kGemvRows == 0;
}

bool gemv_fused_supported(const Tensor& x, const Tensor& w, GemvFusion fusion) {
  const bool half_type = x.dtype == DType::kBF16 || x.dtype == DType::kF16;
  const bool rows_ok = fusion != GemvFusion::kRmsSwiGlu || w.dim(0) % 2 == 0;
  return half_type && w.dtype == x.dtype && x.rows() >= 1 && x.rows() <= kGemvFusedMaxM &&
         w.dim(1) % kGemvStepK == 0 && aligned16(x.data) && aligned16(w.data) && rows_ok;
}

void launch_gemv_fused(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out,
                       GemvFusion fusion, float eps, cudaStream_t stream, bool pdl) {
  IB_ASSERT(gemv_fused_supported(x, w, fusion), "launch_gemv_fused: unsupported operands");
  IB_ASSERT(out.dtype == x.dtype, "launch_gemv_fused: out must have x's dtype");
  if (bias) IB_ASSERT(bias->dtype == w.dtype, "launch_gemv_fused: bias dtype must match w");
  if (x.dtype == DType::kBF16) {
    launch_fused<bf16>(x, w, bias, out, fusion, eps, stream, pdl);
  } else {
    launch_fused<f16>(x, w, bias, out, fusion, eps, stream, pdl);
  }
}

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
