// Reads, applies and reports the CUDA backend's switches (detail/switches.h).
#include "backend/cuda/detail/switches.h"

#include <charconv>
#include <map>

#include "backend/cuda/detail/carveout.h"
#include "backend/cuda/detail/gemv_x_shared.h"
#include "backend/cuda/detail/quant_switches.h"

namespace ib::cuda {

Result<CudaSwitches> read_cuda_switches() {
  IB_ASSIGN_OR_RETURN(const auto env, read_kernel_switch_env("cuda"));  // checks every value
  const auto integer = [&](const char* name) -> std::optional<int64_t> {
    IB_ASSERT(find_kernel_switch(name) != nullptr, name);
    const auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    int64_t x = 0;
    std::from_chars(it->second.data(), it->second.data() + it->second.size(), x);
    return x;
  };
  CudaSwitches s;
  s.debug_sync = integer("IB_CUDA_DEBUG_SYNC");
  s.pdl = integer("IB_PDL");
  s.fused = integer("IB_FUSED");
  s.add_cublaslt = integer("IB_ADD_CUBLASLT");
  s.attn_prefetch = integer("IB_ATTN_PREFETCH");
  s.attn_lean = integer("IB_ATTN_LEAN");
  s.attn_mma = integer("IB_ATTN_MMA");
  s.attn_mixed = integer("IB_ATTN_MIXED");
  s.attn_mma_persist = integer("IB_ATTN_MMA_PERSIST");
  s.attn_e4m3_f16 = integer("IB_ATTN_E4M3_F16");
  s.cuda_mla = integer("IB_CUDA_MLA");
  s.mla_split = integer("IB_MLA_SPLIT");
  s.moe_wide = integer("IB_MOE_WIDE");
  s.moe_tiles = integer("IB_MOE_TILES");
  s.moe_balance = integer("IB_MOE_BALANCE");
  s.moe_warps = integer("IB_MOE_WARPS");
  s.moe_warp_ring = integer("IB_MOE_WARP_RING");
  s.moe_gemm = integer("IB_MOE_GEMM");
  s.quant_gemm = integer("IB_QUANT_GEMM");
  s.moe_shared = integer("IB_MOE_SHARED");
  s.moe_pdl = integer("IB_MOE_PDL");
  s.moe_int4_ring = integer("IB_MOE_INT4_RING");
  s.moe_add_norm = integer("IB_MOE_ADD_NORM");
  s.gemv_persist = integer("IB_GEMV_PERSIST");
  s.gemv_swiglu_blocks = integer("IB_GEMV_SWIGLU_BLOCKS");
  s.gemv_qkv_blocks = integer("IB_GEMV_QKV_BLOCKS");
  s.lora_qkv_blocks = integer("IB_LORA_QKV_BLOCKS");
  s.smem_carveout = integer("IB_SMEM_CARVEOUT");
  s.gemv_ring = integer("IB_GEMV_RING");
  s.gemv_dense_ring = integer("IB_GEMV_DENSE_RING");
  s.gemv_fuse_quant = integer("IB_GEMV_FUSE_QUANT");
  s.gemv_stage_x = integer("IB_GEMV_STAGE_X");
  s.quant_trigger = integer("IB_QUANT_TRIGGER");
  s.quant_sync = integer("IB_QUANT_SYNC");
  s.gemv_stage_norm = integer("IB_GEMV_STAGE_NORM");
  s.gemm_m_buckets = integer("IB_GEMM_M_BUCKETS");
  s.gemm_tune = integer("IB_GEMM_TUNE");
  s.gemv_int4_warps = integer("IB_GEMV_INT4_WARPS");
  s.norm_regs = integer("IB_NORM_REGS");
  s.rope_vec = integer("IB_ROPE_VEC");
  s.norm_post = integer("IB_NORM_POST");
  s.gguf_wide = integer("IB_GGUF_WIDE");
  s.lora_fused = integer("IB_LORA_FUSED");
  s.lora_pdl = integer("IB_LORA_PDL");
  s.lora_in_gemv = integer("IB_LORA_IN_GEMV");
  s.lora_attn = integer("IB_LORA_ATTN");
  if (const auto it = env.find("IB_MATMUL_TUNING"); it != env.end()) s.matmul_tuning = it->second;
  for (const auto& [name, value] : env) s.from_env.insert(name);
  return s;
}

Status apply_cuda_switches(const CudaSwitches& s, CudaBackend& backend) {
  if (s.debug_sync) backend.set_debug_sync(*s.debug_sync == 1);
  if (s.pdl) backend.set_pdl(static_cast<int>(*s.pdl));
  if (s.fused) backend.set_fused(*s.fused == 1);
  if (s.add_cublaslt) backend.set_add_with_cublaslt(*s.add_cublaslt == 1);
  if (s.attn_prefetch) backend.set_attention_prefetch_max_seqs(static_cast<int>(*s.attn_prefetch));
  if (s.attn_lean) backend.set_attention_lean(static_cast<int>(*s.attn_lean));
  if (s.attn_mma) backend.set_attention_mma_min_seqs(static_cast<int>(*s.attn_mma));
  if (s.attn_mixed) backend.set_attention_mixed_min_seqs(static_cast<int>(*s.attn_mixed));
  if (s.attn_mma_persist) backend.set_attention_mma_persist(static_cast<int>(*s.attn_mma_persist));
  if (s.attn_e4m3_f16) backend.set_attention_e4m3_f16(*s.attn_e4m3_f16 == 1);
  if (s.cuda_mla) backend.set_mla(*s.cuda_mla == 1);
  if (s.mla_split) backend.set_mla_split(*s.mla_split == 1);
  if (s.moe_wide) backend.set_moe_wide_tokens(*s.moe_wide);
  if (s.moe_tiles) backend.set_moe_tile_tokens(*s.moe_tiles);
  if (s.moe_balance) backend.set_moe_balance_tokens(*s.moe_balance);
  if (s.moe_warps) backend.set_moe_warp_tokens(*s.moe_warps);
  if (s.moe_warp_ring) backend.set_moe_warp_ring(*s.moe_warp_ring == 1);
  if (s.moe_gemm) backend.set_moe_gemm_tokens(*s.moe_gemm);
  if (s.quant_gemm) backend.set_quant_gemm_rows(*s.quant_gemm);
  if (s.moe_shared) backend.set_moe_shared(*s.moe_shared == 1);
  if (s.moe_pdl) backend.set_moe_pdl(*s.moe_pdl == 1);
  if (s.moe_int4_ring) backend.set_moe_int4_ring(*s.moe_int4_ring == 1);
  if (s.moe_add_norm) backend.set_moe_add_norm(static_cast<int>(*s.moe_add_norm));
  if (s.gemv_persist) set_gemv_persist_blocks_per_sm(static_cast<int>(*s.gemv_persist));
  // Process-wide: every backend sets it, so one created without the variable runs the default.
  set_gemv_swiglu_min_blocks(static_cast<int>(s.gemv_swiglu_blocks.value_or(3)));
  set_gemv_qkv_blocks_from(static_cast<int>(s.gemv_qkv_blocks.value_or(2)));
  set_lora_qkv_blocks(s.lora_qkv_blocks.value_or(1) == 1);
  set_smem_carveout(static_cast<int>(s.smem_carveout.value_or(-1)));
  set_gemv_ring(s.gemv_ring.value_or(1) == 1);
  set_gemv_dense_ring(s.gemv_dense_ring.value_or(0) == 1);
  set_gemv_fuse_quant(s.gemv_fuse_quant.value_or(0) == 1);
  set_gemv_stage_x(static_cast<int>(s.gemv_stage_x.value_or(1)));
  set_quant_trigger(static_cast<int>(s.quant_trigger.value_or(0)));
  set_quant_sync(static_cast<int>(s.quant_sync.value_or(0)));
  set_gemv_stage_norm(s.gemv_stage_norm.value_or(1) == 1);
  backend.set_gemm_m_buckets(static_cast<int>(s.gemm_m_buckets.value_or(4)));
  backend.set_gemm_tuning(s.gemm_tune.value_or(1) == 1);
  set_gemv_int4_warps(static_cast<int>(s.gemv_int4_warps.value_or(0)));
  set_norm_regs(s.norm_regs.value_or(1) == 1);
  set_rope_vec(s.rope_vec.value_or(1) == 1);
  set_norm_post(s.norm_post.value_or(1) == 1);
  set_gguf_wide(s.gguf_wide.value_or(0) == 1);
  if (s.lora_fused) backend.set_lora_fused(*s.lora_fused == 1);
  if (s.lora_pdl) backend.set_lora_pdl(*s.lora_pdl == 1);
  if (s.lora_in_gemv) backend.set_lora_in_gemv(static_cast<int>(*s.lora_in_gemv));
  if (s.lora_attn) IB_TRY(backend.set_lora_attn(*s.lora_attn == 1));
  if (s.matmul_tuning == "0") backend.set_tuning(false);
  if (s.matmul_tuning == "2") backend.set_gemv_rule_rows(0);
  if (s.matmul_tuning == "3") backend.set_gemv_rule_rows(CudaBackend::kTuneMaxM);
  if (s.matmul_tuning == "gemv") {
    backend.set_gemv_max_m(8);
    backend.set_gemv_max_weight_bytes(INT64_MAX);
  }
  backend.set_switches_from_env(s.from_env);
  return {};
}

// Read back from the settings the backend runs with, not from the environment.
KernelSwitches CudaBackend::kernel_switches() const {
  const auto flag = [](bool on) { return std::string(on ? "1" : "0"); };
  const std::string tuning = tuning_                               ? (gemv_rule_rows_ == 0   ? "2"
                                                                      : gemv_rule_rows_ == 1 ? "1"
                                                                                             : "3")
                             : gemv_max_weight_bytes_ == INT64_MAX ? "gemv"
                                                                   : "0";
  KernelSwitches out{
      {"IB_CUDA_DEBUG_SYNC", {flag(debug_sync_)}},
      {"IB_PDL", {std::to_string(pdl_mode())}},
      {"IB_FUSED", {flag(fused_)}},
      {"IB_ADD_CUBLASLT", {flag(add_with_cublaslt_)}},
      {"IB_MATMUL_TUNING", {tuning}},
      {"IB_ATTN_PREFETCH", {std::to_string(attention_prefetch_max_seqs_)}},
      {"IB_ATTN_LEAN", {std::to_string(attention_lean_)}},
      {"IB_ATTN_MMA", {std::to_string(attention_mma_min_seqs_)}},
      {"IB_ATTN_MIXED", {std::to_string(attention_mixed_min_seqs_)}},
      {"IB_ATTN_MMA_PERSIST", {std::to_string(attention_mma_persist_)}},
      {"IB_ATTN_E4M3_F16", {flag(attention_e4m3_f16_)}},
      {"IB_CUDA_MLA", {flag(mla_)}},
      {"IB_MLA_SPLIT", {flag(mla_split_)}},
      {"IB_MOE_WIDE", {std::to_string(moe_wide_tokens_)}},
      {"IB_MOE_TILES", {std::to_string(moe_tile_tokens_)}},
      {"IB_MOE_BALANCE", {std::to_string(moe_balance_tokens_)}},
      {"IB_MOE_WARPS", {std::to_string(moe_warp_tokens_)}},
      {"IB_MOE_WARP_RING", {flag(moe_warp_ring_)}},
      {"IB_MOE_GEMM", {std::to_string(moe_gemm_tokens_)}},
      {"IB_QUANT_GEMM", {std::to_string(quant_gemm_rows_)}},
      {"IB_MOE_SHARED", {flag(moe_shared_)}},
      {"IB_MOE_PDL", {flag(moe_pdl_)}},
      {"IB_MOE_INT4_RING", {flag(moe_int4_ring_)}},
      {"IB_MOE_ADD_NORM", {std::to_string(moe_add_norm_)}},
      {"IB_GEMV_PERSIST", {std::to_string(gemv_persist_blocks_per_sm())}},
      {"IB_GEMV_SWIGLU_BLOCKS", {std::to_string(gemv_swiglu_min_blocks())}},
      {"IB_GEMV_QKV_BLOCKS", {std::to_string(gemv_qkv_blocks_from())}},
      {"IB_LORA_QKV_BLOCKS", {flag(lora_qkv_blocks())}},
      {"IB_SMEM_CARVEOUT", {std::to_string(smem_carveout())}},
      {"IB_GEMV_RING", {flag(gemv_ring())}},
      {"IB_GEMV_DENSE_RING", {flag(gemv_dense_ring())}},
      {"IB_GEMV_FUSE_QUANT", {flag(gemv_fuse_quant())}},
      {"IB_GEMV_STAGE_X", {std::to_string(gemv_stage_x())}},
      {"IB_QUANT_TRIGGER", {std::to_string(quant_trigger())}},
      {"IB_QUANT_SYNC", {std::to_string(quant_sync())}},
      {"IB_GEMV_STAGE_NORM", {flag(gemv_stage_norm())}},
      {"IB_GEMM_M_BUCKETS", {std::to_string(gemm_m_buckets())}},
      {"IB_GEMM_TUNE", {flag(gemm_tuning())}},
      {"IB_GEMV_INT4_WARPS", {std::to_string(gemv_int4_warps())}},
      {"IB_NORM_REGS", {flag(norm_regs())}},
      {"IB_ROPE_VEC", {flag(rope_vec())}},
      {"IB_NORM_POST", {flag(norm_post())}},
      {"IB_GGUF_WIDE", {flag(gguf_wide())}},
      {"IB_LORA_FUSED", {flag(lora_fused_)}},
      {"IB_LORA_PDL", {flag(lora_pdl_)}},
      {"IB_LORA_IN_GEMV", {std::to_string(lora_in_gemv_)}},
      {"IB_LORA_ATTN", {flag(lora_attn_)}},
  };
  for (auto& [name, setting] : out) setting.from_env = switches_from_env_.count(name) == 1;
  check_kernel_switch_report(out, "cuda");
  return out;
}

}  // namespace ib::cuda
