// CudaBackend's LoraOps (backend/ops.h): shape checks, then lora.cu's launcher. The stacks'
// pointers travel as a kernel parameter and the shrunk rows live in the attention workspace
// (free between ops), so the op neither allocates, synchronizes nor reads slot ids on the host:
// it runs inside the decode CUDA graphs.
#include "backend/cuda/detail/cuda_backend_impl.h"
#include "backend/cuda/detail/lora_kernels.h"

namespace ib::cuda {

void CudaBackend::lora_apply(const Tensor& x, const Tensor& slot_ids, const Tensor& a,
                             const Tensor& b, const Tensor& scales, int64_t row_offset,
                             Tensor out) {
  const LoraTargetStacks target{a, b, row_offset};
  lora_apply_group(x, slot_ids, std::span(&target, 1), scales, out);
}

void CudaBackend::lora_apply_group(const Tensor& x, const Tensor& slot_ids,
                                   std::span<const LoraTargetStacks> targets, const Tensor& scales,
                                   Tensor out) {
  IB_ASSERT(!targets.empty() && targets.size() <= kMaxLoraGroup,
            "lora_apply: 1 to 3 targets per group");
  IB_ASSERT(x.dtype == dtype_ && out.dtype == dtype_ && scales.dtype == DType::kF32 &&
                slot_ids.dtype == DType::kI32,
            "lora_apply: x, out in act; scales f32; slot_ids int32");
  const int64_t t = x.rows(), k = x.row_size();
  IB_ASSERT(targets[0].a.rank == 3, "lora_apply: a (S, R, K)");
  const int64_t s = targets[0].a.dim(0), r = targets[0].a.dim(1);
  IB_ASSERT(s >= 1 && r >= 1 && scales.numel() == s && slot_ids.numel() == t && out.rows() == t,
            "lora_apply: scales (S), slot_ids (T), out (T, ...)");
  LoraGroupPtrs group;
  for (size_t i = 0; i < targets.size(); ++i) {
    const LoraTargetStacks& g = targets[i];
    const int64_t n = g.b.rank == 3 ? g.b.dim(1) : 0;
    IB_ASSERT(g.a.rank == 3 && g.b.rank == 3 && g.a.dtype == dtype_ && g.b.dtype == dtype_,
              "lora_apply: a (S, R, K), b (S, N, R) in act");
    IB_ASSERT(g.a.dim(0) == s && g.a.dim(1) == r && g.a.dim(2) == k && g.b.dim(0) == s &&
                  g.b.dim(2) == r && n >= 1 && g.row_offset >= 0 &&
                  g.row_offset + n <= out.row_size(),
              "lora_apply: shapes x (T, K), a (S, R, K), b (S, N, R) alike across the group, "
              "out (T, >= row_offset + N)");
    for (size_t j = 0; j < i; ++j) {  // disjoint row ranges: each element is added to once
      const LoraTargetStacks& h = targets[j];
      IB_ASSERT(g.row_offset + n <= h.row_offset || h.row_offset + h.b.dim(1) <= g.row_offset,
                "lora_apply: the group's row ranges overlap");
    }
    group.a[i] = g.a.data;
    group.b[i] = g.b.data;
    group.n[i] = n;
    group.row_offset[i] = g.row_offset;
  }
  group.count = static_cast<int>(targets.size());
  IB_ASSERT(lora_chunk_tokens(group.count * r, attention_workspace_.bytes()) >= 1,
            "lora_apply: one token's shrunk rows (3 x rank fp32) exceed the workspace");
  run_op("lora_apply", [&] {
    unsigned* counters = lora_fused_ ? static_cast<unsigned*>(lora_counters_.data()) : nullptr;
    launch_lora_apply(x, slot_ids, group, r, s, scales, attention_workspace_.data(),
                      attention_workspace_.bytes(), counters, out, stream_, pdl_ && lora_pdl_);
  });
}

}  // namespace ib::cuda
