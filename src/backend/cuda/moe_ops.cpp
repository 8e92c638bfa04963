// CudaBackend's MoeOps (backend/ops.h): shape checks, then the moe.cu launchers. The experts'
// pointers travel as a kernel parameter and their scratch is the attention workspace (free
// between ops), so neither op allocates, synchronizes or reads expert ids on the host: both run
// inside the decode CUDA graphs.
#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/cuda_backend_impl.h"
#include "backend/cuda/detail/moe_kernels.h"

namespace ib::cuda {

void CudaBackend::moe_route(const Tensor& router_logits, bool renormalize, Tensor expert_ids,
                            Tensor expert_weights, Tensor expert_tokens) {
  MoeRouting routing;
  routing.renormalize = renormalize;
  moe_route_grouped(router_logits, routing, expert_ids, expert_weights, expert_tokens);
}

void CudaBackend::moe_route_grouped(const Tensor& router_logits, const MoeRouting& routing,
                                    Tensor expert_ids, Tensor expert_weights,
                                    Tensor expert_tokens) {
  const int64_t t = router_logits.rows(), e = router_logits.row_size();
  const int64_t width = expert_ids.row_size(), k = width - routing.always_on;
  IB_ASSERT(router_logits.dtype == DType::kF32 && expert_ids.dtype == DType::kI32 &&
                expert_weights.dtype == DType::kF32 && expert_tokens.dtype == DType::kI64,
            "moe_route: logits f32, ids int32, weights f32, counts int64");
  IB_ASSERT(expert_ids.rows() == t && expert_weights.rows() == t &&
                expert_weights.row_size() == width && k >= 1 && k <= e && k <= kMoeMaxTopK &&
                routing.always_on >= 0 && width <= 32 && expert_tokens.numel() == e,
            "moe_route: logits (T, E), ids and weights (T, k + always_on), k <= E and <= 8, at "
            "most 32 columns, counts (E)");
  IB_ASSERT(routing.num_groups <= 1 ||
                (e % routing.num_groups == 0 && routing.num_groups <= kMoeMaxGroups &&
                 routing.topk_groups >= 1 && routing.topk_groups <= routing.num_groups &&
                 routing.topk_groups * (e / routing.num_groups) >= k),
            "moe_route_grouped: groups (at most 64) must divide E and the groups kept hold k "
            "experts");
  MoeRouteParams params;
  params.renormalize = routing.renormalize;
  params.num_groups = routing.num_groups;
  params.topk_groups = routing.topk_groups;
  params.scale = routing.scale;
  params.always_on = routing.always_on;
  run_op("moe_route", [&] {
    launch_moe_route(router_logits, params, expert_ids, expert_weights, expert_tokens, stream_,
                     pdl_ && moe_pdl_);
  });
}

void CudaBackend::poison_workspace() {
  IB_CUDA_CHECK(
      cudaMemsetAsync(attention_workspace_.data(), 0xff, attention_workspace_.bytes(), stream_),
      "poison_workspace");
}

namespace {

// moe_experts' checks, then its kernels: the output into out (add_norm null), or added and
// normalised into add_norm's tensors (moe_experts_add_rms_norm). Returns whether the grouped GEMM
// ran.
bool check_and_launch(const Tensor& x, const Tensor& expert_ids, const Tensor& expert_weights,
                      std::span<const WeightRef> gate_up, std::span<const WeightRef> down,
                      DType act, const Buffer& workspace, const MoeKernelChoice& choice, Tensor out,
                      cudaStream_t stream, const MoeAddNorm* add_norm) {
  const int64_t t = x.rows(), d = x.row_size(), k = expert_ids.row_size();
  const auto e = static_cast<int64_t>(gate_up.size());
  IB_ASSERT(x.dtype == act, "moe_experts: x in act");
  IB_ASSERT(e > 0 && e <= kMoeMaxExperts && down.size() == gate_up.size() &&
                expert_ids.dtype == DType::kI32 && expert_weights.dtype == DType::kF32 &&
                expert_ids.rows() == t && expert_weights.rows() == t &&
                expert_weights.row_size() == k && k >= 1,
            "moe_experts: x (T, D); ids int32, weights f32 (T, k); 1-256 experts");
  const int64_t f = gate_up[0].rows() / 2;
  const bool int4 = gate_up[0].format == WeightFormat::kInt4W4A16;
  MoeExpertPtrs gate_up_ptrs, down_ptrs;
  MoeInt4Experts int4_ptrs;  // 12 KiB of pointers, copied into the two launches
  const auto int4_matrix = [](const WeightRef& w, MoeInt4Ptrs& ptrs, size_t i) {
    // Other layouts are refused before loading (detail::check_moe_runs, runs_quantized_experts).
    IB_ASSERT(w.format == WeightFormat::kInt4W4A16 && w.quantized_layout_ok() &&
                  w.input_perm.empty() && moe_int4_takes(w.cols(), w.group_size) &&
                  (i == 0 || w.group_size == ptrs.group_size),
              "moe_experts: 4-bit experts in groups of a multiple of 128, without act-order");
    ptrs.codes[i] = w.data.data;
    ptrs.scales[i] = w.scales.data;
    ptrs.zeros[i] = w.zeros.data;
    ptrs.group_size = w.group_size;
  };
  for (size_t i = 0; i < gate_up.size(); ++i) {
    const WeightRef &gu = gate_up[i], &dn = down[i];
    IB_ASSERT(gu.rows() == 2 * f && gu.cols() == d && dn.rows() == d && dn.cols() == f,
              "moe_experts: expert gate_up (2F, D), down (D, F)");
    if (int4) {
      int4_matrix(gu, int4_ptrs.gate_up, i);
      int4_matrix(dn, int4_ptrs.down, i);
      continue;
    }
    IB_ASSERT(gu.format == WeightFormat::kDense && dn.format == WeightFormat::kDense &&
                  gu.data.dtype == act && dn.data.dtype == act,
              "moe_experts: dense experts in act, or 4-bit ones (runs_quantized_experts)");
    gate_up_ptrs.ptr[i] = gu.data.data;
    down_ptrs.ptr[i] = dn.data.data;
  }
  IB_ASSERT(moe_chunk_tokens(1, k, d, f, act, workspace.bytes()) >= 1,
            "moe_experts: one token's expert activations exceed the workspace");
  return launch_moe_experts(x, expert_ids, expert_weights, gate_up_ptrs, down_ptrs,
                            static_cast<int>(e), f, workspace.data(), workspace.bytes(), choice,
                            out, stream, add_norm, int4 ? &int4_ptrs : nullptr);
}

}  // namespace

bool CudaBackend::runs_quantized_experts(const QuantizedExperts& experts) const {
  return experts.format == WeightFormat::kInt4W4A16 && supports_weight_format(experts.format) &&
         !experts.act_order && moe_int4_takes(experts.hidden, experts.group_size) &&
         moe_int4_takes(experts.width, experts.group_size);
}

MoeKernelChoice CudaBackend::moe_kernel_choice() const {
  MoeKernelChoice choice;
  choice.num_sms = num_sms_;
  choice.wide_max_tokens = moe_wide_tokens_;
  choice.tile_max_tokens = moe_tile_tokens_;
  choice.balance_max_tokens = moe_balance_tokens_;
  choice.warp_max_tokens = moe_warp_tokens_;
  choice.warp_ring = moe_warp_ring_;
  choice.pdl = pdl_ && moe_pdl_;
  choice.int4_ring = moe_int4_ring_;
  choice.gemm_min_tokens = moe_gemm_tokens_;
  return choice;
}

void CudaBackend::moe_experts(const Tensor& x, const Tensor& expert_ids,
                              const Tensor& expert_weights, std::span<const WeightRef> gate_up,
                              std::span<const WeightRef> down, Tensor out) {
  IB_ASSERT(out.dtype == dtype_ && out.rows() == x.rows() && out.row_size() == x.row_size(),
            "moe_experts: out (T, D) in act");
  const MoeKernelChoice choice = moe_kernel_choice();
  run_op("moe_experts", [&] {
    moe_gemm_launches_ += check_and_launch(x, expert_ids, expert_weights, gate_up, down, dtype_,
                                           attention_workspace_, choice, out, stream_, nullptr);
  });
}

void CudaBackend::moe_experts_add_rms_norm(const Tensor& x, const Tensor& expert_ids,
                                           const Tensor& expert_weights,
                                           std::span<const WeightRef> gate_up,
                                           std::span<const WeightRef> down, Tensor residual,
                                           const Tensor& norm_weight, float eps, Tensor normed) {
  IB_ASSERT(residual.rows() == x.rows() && residual.row_size() == x.row_size() &&
                normed.rows() == x.rows() && normed.row_size() == x.row_size() &&
                residual.dtype == dtype_ && normed.dtype == dtype_ && norm_weight.dtype == dtype_ &&
                norm_weight.numel() == x.row_size(),
            "moe_experts_add_rms_norm: residual, normed (T, D) and norm_weight (D) in act");
  const MoeKernelChoice choice = moe_kernel_choice();
  const MoeAddNorm add_norm{residual, norm_weight, eps, normed};
  run_op("moe_experts_add_rms_norm", [&] {
    if (moe_add_norm_ == 2) {
      // The experts' combine into normed (x, which may be normed itself, is read by the gate_up
      // kernel, which the combine waits for), then residual += it and its norm, in place (the
      // norm kernels read x before the barrier that precedes their writes).
      moe_gemm_launches_ +=
          check_and_launch(x, expert_ids, expert_weights, gate_up, down, dtype_,
                           attention_workspace_, choice, normed, stream_, nullptr);
      launch_rms_norm(&residual, normed, norm_weight, eps, normed, stream_, pdl_);
      return;
    }
    moe_gemm_launches_ +=
        check_and_launch(x, expert_ids, expert_weights, gate_up, down, dtype_, attention_workspace_,
                         choice, normed, stream_, &add_norm);
  });
}

}  // namespace ib::cuda
