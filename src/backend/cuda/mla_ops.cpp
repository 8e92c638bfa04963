// CudaBackend's MlaOps (backend/ops.h): shape checks, then the mla.cu launchers. Offered to the
// engine unless IB_CUDA_MLA=0 (CudaBackend::mla_ops); tested against the CPU oracle
// (cuda_mla_test.cpp) and, through the engine, against transformers (tools/hf_compare.py).
#include "backend/cuda/detail/cuda_backend_impl.h"
#include "backend/cuda/detail/mla_kernels.h"
#include "backend/mla_checks.h"

namespace ib::cuda {

void CudaBackend::mla_rope_and_cache(Tensor q, Tensor latent, const Tensor& kv_norm, float eps,
                                     const Tensor& positions, const Tensor& slot_mapping,
                                     const Tensor& inv_freq, const KvCacheLayer& kv,
                                     const MlaShape& shape) {
  IB_ASSERT(mla_shape_supported(shape), "mla_rope_and_cache: R <= 512, P even and <= 128");
  IB_ASSERT(q.dtype == dtype_ && latent.dtype == dtype_ && kv_norm.dtype == dtype_ &&
                kv.k.dtype == dtype_ && inv_freq.dtype == DType::kF32 &&
                positions.dtype == DType::kI32 && slot_mapping.dtype == DType::kI32,
            "mla_rope_and_cache: q, latent, kv_norm and the cache in act; inv_freq f32; int32 "
            "positions and slots");
  check_mla_rope_and_cache_shapes(q, latent, kv_norm, positions, slot_mapping, inv_freq, kv, shape);
  run_op("mla_rope_and_cache", [&] {
    launch_mla_rope_and_cache(q, latent, kv_norm, eps, positions, slot_mapping, inv_freq, kv, shape,
                              stream_, pdl_);
  });
}

void CudaBackend::mla_attention(const Tensor& q, const WeightRef& kv_b, const KvCacheLayer& kv,
                                const AttentionMetadata& meta, const MlaShape& shape, Tensor out) {
  IB_ASSERT(mla_shape_supported(shape), "mla_attention: R <= 512, P even and <= 128");
  IB_ASSERT(q.dtype == dtype_ && out.dtype == dtype_ && kv.k.dtype == dtype_ &&
                kv_b.format == WeightFormat::kDense && kv_b.data.dtype == dtype_,
            "mla_attention: q, out, the cache and a dense kv_b in act");
  check_mla_attention_shapes(q, kv_b, kv, meta, shape, out);
  run_op("mla_attention", [&] {
    if (mla_split_) {
      launch_mla_split_attention(q, kv_b.data, kv, meta, shape, out, attention_workspace_.data(),
                                 attention_workspace_.bytes(), num_sms_, stream_, pdl_);
    } else {
      launch_mla_attention(q, kv_b.data, kv, meta, shape, out, stream_, pdl_);
    }
  });
}

}  // namespace ib::cuda
