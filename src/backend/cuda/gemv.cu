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

// The FP8 operands of a launch: the weight's row scales and x's token scales (dense: none).
GemvFp8 fp8_operands(const WeightRef& w, const GemvFp8Act* act) {
  GemvFp8 q;
  if (w.format == WeightFormat::kFp8E4M3) q.w_scales = w.scales.as<float>();
  q.x_scales = act ? act->scales.as<float>() : nullptr;
  return q;
}

// FP8: x (times the gain, normalised where rms) quantized per token into act's first M rows,
// the GEMV's input.
GemvFp8Act quantize_act(const Tensor& x, const Tensor* gain, float eps, bool rms,
                        const GemvFp8Act* act, cudaStream_t stream, bool pdl) {
  IB_ASSERT(act != nullptr && act->xq.dtype == DType::kF8E4M3 &&
                act->xq.row_size() == x.row_size() && act->xq.rows() >= x.rows() &&
                act->scales.numel() >= x.rows() && aligned16(act->xq.data),
            "FP8 GEMV: activation scratch of at least (M, K) E4M3 and (M) scales expected");
  GemvFp8Act q;
  q.xq = act->xq.slice_rows(0, x.rows());
  q.scales = act->scales.reshaped({act->scales.numel(), 1}).slice_rows(0, x.rows());
  launch_quantize_rms_rows_fp8(x, gain, eps, rms, q.xq, q.scales, stream, pdl);
  return q;
}

// One GEMV launch of `blocks` blocks: FP8 weights read x quantized by quantize_act first.
template <typename T, typename TOut, int NT, int kEpilogue, bool kRms, bool kFp8>
void launch_config(const char* op, unsigned blocks, const Tensor& x, const WeightRef& w,
                   const T* bias, Tensor out, float eps, const GemvRopeCache& rc,
                   const Tensor* gain, const GemvFp8Act* act, cudaStream_t stream, bool pdl) {
  const int m = static_cast<int>(x.rows());
  const int n = static_cast<int>(w.data.dim(0));
  const int k = static_cast<int>(w.data.dim(1));
  const void* wp = w.data.data;
  if constexpr (kFp8) {
    const GemvFp8Act q = quantize_act(x, gain, eps, kRms, act, stream, pdl);
    launch_kernel(op, pdl,
                  gemv_kernel<T, TOut, NT, kWarps, kUnroll, kAdjacent, kEpilogue, kRms, true>,
                  dim3(blocks), dim3(kWarps * 32), 0, stream, static_cast<const void*>(q.xq.data),
                  wp, bias, out.as<TOut>(), m, n, k, eps, rc, fp8_operands(w, &q));
  } else {
    launch_kernel(op, pdl,
                  gemv_kernel<T, TOut, NT, kWarps, kUnroll, kAdjacent, kEpilogue, kRms, false>,
                  dim3(blocks), dim3(kWarps * 32), 0, stream, static_cast<const void*>(x.data), wp,
                  bias, out.as<TOut>(), m, n, k, eps, rc, fp8_operands(w, nullptr));
  }
}

template <typename T, typename TOut, int NT, bool kFp8>
void launch_nt(const Tensor& x, const WeightRef& w, const T* bias, Tensor out, cudaStream_t stream,
               bool pdl, const GemvFp8Act* act) {
  const int n = static_cast<int>(w.data.dim(0));
  const unsigned blocks = static_cast<unsigned>((n + kGemvRows - 1) / kGemvRows);
  launch_config<T, TOut, NT, kGemvStore, false, kFp8>("matmul(gemv)", blocks, x, w, bias, out, 0.0f,
                                                      GemvRopeCache{}, nullptr, act, stream, pdl);
}

template <typename T, typename TOut, bool kFp8>
void launch_typed(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out,
                  cudaStream_t stream, bool pdl, const GemvFp8Act* act) {
  const T* b = bias ? bias->as<T>() : nullptr;
  const int64_t m = x.rows();
  if constexpr (kFp8) {  // up to 8 tokens (gemv_supported)
    launch_nt<T, TOut, 1, true>(x, w, b, out, stream, pdl, act);
  } else if (m <= 8) {
    launch_nt<T, TOut, 1, false>(x, w, b, out, stream, pdl, act);
  } else if (m <= 16) {
    launch_nt<T, TOut, 2, false>(x, w, b, out, stream, pdl, act);
  } else {
    launch_nt<T, TOut, 4, false>(x, w, b, out, stream, pdl, act);
  }
}

// The fused decode variants, M <= 8 (one n-tile).
template <typename T, int kEpilogue, bool kRms, bool kFp8>
void launch_fused_typed(const Tensor& x, const WeightRef& w, const Tensor* gain, const Tensor* bias,
                        Tensor out, float eps, cudaStream_t stream, bool pdl, const GemvFp8Act* act,
                        const GemvRopeCache& rc = {}) {
  const int n = static_cast<int>(w.data.dim(0));
  const int rows_per_block = kEpilogue == kGemvSwiGlu ? kGemvRows / 2 : kGemvRows;
  const int features = kEpilogue == kGemvSwiGlu ? n / 2 : n;
  const unsigned blocks = static_cast<unsigned>((features + rows_per_block - 1) / rows_per_block);
  launch_config<T, T, 1, kEpilogue, kRms, kFp8>("matmul(gemv, fused)", blocks, x, w,
                                                bias ? bias->as<T>() : nullptr, out, eps, rc, gain,
                                                act, stream, pdl);
}

template <typename T, bool kFp8>
void launch_fused(const Tensor& x, const WeightRef& w, const Tensor* gain, const Tensor* bias,
                  Tensor out, GemvFusion fusion, float eps, cudaStream_t stream, bool pdl,
                  const GemvFp8Act* act) {
  switch (fusion) {
    case GemvFusion::kRmsSwiGlu:
      return launch_fused_typed<T, kGemvSwiGlu, true, kFp8>(x, w, gain, bias, out, eps, stream, pdl,
                                                            act);
    case GemvFusion::kAccumulate:
      return launch_fused_typed<T, kGemvAccumulate, false, kFp8>(x, w, gain, bias, out, eps, stream,
                                                                 pdl, act);
  }
}

bool is_fp8(const WeightRef& w) {
  return w.format == WeightFormat::kFp8E4M3;
}

}  // namespace

void launch_gemv_rope_cache(const Tensor& x, const Tensor* gain, const WeightRef& w,
                            const Tensor* bias, float eps, const Tensor& positions,
                            const Tensor& slot_mapping, const Tensor& inv_freq,
                            const KvCacheLayer& kv, const AttentionShape& shape, Tensor qkv,
                            cudaStream_t stream, bool pdl, const GemvFp8Act* act) {
  IB_ASSERT(gemv_rope_cache_supported(x, w, shape), "launch_gemv_rope_cache: unsupported operands");
  IB_ASSERT(is_fp8(w) || gain == nullptr,
            "launch_gemv_rope_cache: a dense weight has its gain folded");
  const bool cache_fp8 = kv.k.dtype == DType::kF8E4M3;
  IB_ASSERT(
      qkv.dtype == x.dtype && (kv.k.dtype == x.dtype || cache_fp8) && kv.v.dtype == kv.k.dtype,
      "launch_gemv_rope_cache: qkv has x's dtype, the cache x's dtype or fp8_e4m3");
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
  rc.cache_fp8 = cache_fp8;
  rc.k_scale = kv.k_scale;
  rc.v_scale = kv.v_scale;
  const bool bf = x.dtype == DType::kBF16;
  if (is_fp8(w)) {
    if (bf) {
      launch_fused_typed<bf16, kGemvRopeCache, true, true>(x, w, gain, bias, qkv, eps, stream, pdl,
                                                           act, rc);
    } else {
      launch_fused_typed<f16, kGemvRopeCache, true, true>(x, w, gain, bias, qkv, eps, stream, pdl,
                                                          act, rc);
    }
  } else if (bf) {
    launch_fused_typed<bf16, kGemvRopeCache, true, false>(x, w, nullptr, bias, qkv, eps, stream,
                                                          pdl, nullptr, rc);
  } else {
    launch_fused_typed<f16, kGemvRopeCache, true, false>(x, w, nullptr, bias, qkv, eps, stream, pdl,
                                                         nullptr, rc);
  }
}

bool gemv_rope_cache_supported(const Tensor& x, const WeightRef& w, const AttentionShape& shape) {
  return gemv_fused_supported(x, w, GemvFusion::kAccumulate) && shape.head_dim % kGemvRows == 0 &&
         w.data.dim(0) == int64_t{shape.num_heads + 2 * shape.num_kv_heads} * shape.head_dim;
}

bool gemv_fused_shapes_fit(const AttentionShape& shape, int64_t hidden_size,
                           int64_t intermediate_size) {
  const int64_t q = int64_t{shape.num_heads} * shape.head_dim;
  return hidden_size % kGemvStepK == 0 && intermediate_size % kGemvStepK == 0 &&
         q % kGemvStepK == 0 && shape.head_dim % kGemvRows == 0;
}

// The weight's storage matches x (dense) or is E4M3 with f32 row scales (FP8).
bool gemv_weight_ok(const Tensor& x, const WeightRef& w) {
  if (is_fp8(w)) {
    return w.data.dtype == DType::kF8E4M3 && w.scales.dtype == DType::kF32 &&
           w.scales.numel() == w.data.dim(0);
  }
  return w.format == WeightFormat::kDense && w.data.dtype == x.dtype;
}

bool gemv_fused_supported(const Tensor& x, const WeightRef& w, GemvFusion fusion) {
  const bool half_type = x.dtype == DType::kBF16 || x.dtype == DType::kF16;
  const bool rows_ok = fusion != GemvFusion::kRmsSwiGlu || w.data.dim(0) % 2 == 0;
  return half_type && gemv_weight_ok(x, w) && x.rows() >= 1 && x.rows() <= kGemvFusedMaxM &&
         w.data.dim(1) % kGemvStepK == 0 && aligned16(x.data) && aligned16(w.data.data) && rows_ok;
}

void launch_gemv_fused(const Tensor& x, const Tensor* gain, const WeightRef& w, const Tensor* bias,
                       Tensor out, GemvFusion fusion, float eps, cudaStream_t stream, bool pdl,
                       const GemvFp8Act* act) {
  IB_ASSERT(gemv_fused_supported(x, w, fusion), "launch_gemv_fused: unsupported operands");
  IB_ASSERT(out.dtype == x.dtype, "launch_gemv_fused: out must have x's dtype");
  IB_ASSERT(is_fp8(w) || gain == nullptr, "launch_gemv_fused: a dense weight has its gain folded");
  if (gain)
    IB_ASSERT(gain->dtype == x.dtype && gain->numel() == x.row_size(),
              "launch_gemv_fused: gain (K) of x's dtype");
  if (bias) IB_ASSERT(bias->dtype == x.dtype, "launch_gemv_fused: bias dtype must match x");
  const bool bf = x.dtype == DType::kBF16;
  if (is_fp8(w)) {
    if (bf) {
      launch_fused<bf16, true>(x, w, gain, bias, out, fusion, eps, stream, pdl, act);
    } else {
      launch_fused<f16, true>(x, w, gain, bias, out, fusion, eps, stream, pdl, act);
    }
  } else if (bf) {
    launch_fused<bf16, false>(x, w, nullptr, bias, out, fusion, eps, stream, pdl, nullptr);
  } else {
    launch_fused<f16, false>(x, w, nullptr, bias, out, fusion, eps, stream, pdl, nullptr);
  }
}

bool gemv_supported(const Tensor& x, const WeightRef& w, const Tensor& out) {
  const bool half_type = x.dtype == DType::kBF16 || x.dtype == DType::kF16;
  // FP8 writes x's dtype only (its weights never produce the fp32 logits: lm_head stays dense).
  const bool out_ok = out.dtype == x.dtype || (!is_fp8(w) && out.dtype == DType::kF32);
  // FP8 takes up to 8 tokens (one n-tile; cuBLASLt's E4M3 GEMM wins from 16, bench/NOTES.md).
  const int64_t max_m = is_fp8(w) ? kGemvFusedMaxM : kGemvMaxM;
  return half_type && gemv_weight_ok(x, w) && out_ok && x.rows() >= 1 && x.rows() <= max_m &&
         w.data.dim(1) % kGemvStepK == 0 && aligned16(x.data) && aligned16(w.data.data);
}

void launch_gemv(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out,
                 cudaStream_t stream, bool pdl, const GemvFp8Act* act) {
  IB_ASSERT(gemv_supported(x, w, out), "launch_gemv: operands the GEMV kernel cannot run");
  if (bias) IB_ASSERT(bias->dtype == x.dtype, "launch_gemv: bias dtype must match x");
  const bool bf = x.dtype == DType::kBF16;
  if (is_fp8(w)) {
    if (bf) {
      launch_typed<bf16, bf16, true>(x, w, bias, out, stream, pdl, act);
    } else {
      launch_typed<f16, f16, true>(x, w, bias, out, stream, pdl, act);
    }
  } else if (bf) {
    if (out.dtype == DType::kF32) {
      launch_typed<bf16, float, false>(x, w, bias, out, stream, pdl, nullptr);
    } else {
      launch_typed<bf16, bf16, false>(x, w, bias, out, stream, pdl, nullptr);
    }
  } else {
    if (out.dtype == DType::kF32) {
      launch_typed<f16, float, false>(x, w, bias, out, stream, pdl, nullptr);
    } else {
      launch_typed<f16, f16, false>(x, w, bias, out, stream, pdl, nullptr);
    }
  }
}

}  // namespace ib::cuda
