// Reads and applies the CUDA backend's switches (detail/switches.h).
#include "backend/cuda/detail/switches.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

namespace ib::cuda {
namespace {

// An integer switch from the environment: nullopt when unset, a user error naming the variable
// and its range when it is not an integer in [lo, hi].
Result<std::optional<int64_t>> env_int(const char* name, int64_t lo, int64_t hi) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::optional<int64_t>{};
  const std::string_view text(value);
  int64_t x = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || x < lo || x > hi)
    return user_error(std::string(name) + "='" + std::string(text) +
                      "' is not valid: use an integer from " + std::to_string(lo) + " to " +
                      std::to_string(hi) + ", or unset it");
  return std::optional<int64_t>{x};
}

}  // namespace

Result<CudaSwitches> read_cuda_switches() {
  CudaSwitches s;
  IB_ASSIGN_OR_RETURN(s.debug_sync, env_int("IB_CUDA_DEBUG_SYNC", 0, 1));
  IB_ASSIGN_OR_RETURN(s.pdl, env_int("IB_PDL", 0, 1));
  IB_ASSIGN_OR_RETURN(s.fused, env_int("IB_FUSED", 0, 1));
  IB_ASSIGN_OR_RETURN(s.add_cublaslt, env_int("IB_ADD_CUBLASLT", 0, 1));
  IB_ASSIGN_OR_RETURN(s.l2_prefetch, env_int("IB_L2_PREFETCH", 0, 3));
  IB_ASSIGN_OR_RETURN(s.l2_prefetch_mb, env_int("IB_L2_PREFETCH_MB", 1, 1 << 20));
  IB_ASSIGN_OR_RETURN(s.attn_prefetch, env_int("IB_ATTN_PREFETCH", 0, 1));
  IB_ASSIGN_OR_RETURN(s.swiglu_cublaslt_min_m, env_int("IB_SWIGLU_CUBLASLT_MIN_M", 0, 1 << 20));
  if (const char* tune = std::getenv("IB_MATMUL_TUNING"); tune) {
    s.matmul_tuning = tune;
    if (s.matmul_tuning != "0" && s.matmul_tuning != "1" && s.matmul_tuning != "gemv")
      return user_error("IB_MATMUL_TUNING='" + s.matmul_tuning +
                        "' is not valid: use 0, 1 or gemv, or unset it");
  }
  return s;
}

void apply_cuda_switches(const CudaSwitches& s, CudaBackend& backend) {
  if (s.debug_sync) backend.set_debug_sync(*s.debug_sync == 1);
  if (s.pdl) backend.set_pdl(*s.pdl == 1);
  if (s.fused) backend.set_fused(*s.fused == 1);
  if (s.add_cublaslt) backend.set_add_with_cublaslt(*s.add_cublaslt == 1);
  if (s.l2_prefetch) backend.set_l2_prefetch(static_cast<int>(*s.l2_prefetch));
  if (s.l2_prefetch_mb)
    backend.set_l2_prefetch_max_bytes(static_cast<size_t>(*s.l2_prefetch_mb) << 20);
  if (s.attn_prefetch) backend.set_attention_prefetch_kv(*s.attn_prefetch == 1);
  if (s.swiglu_cublaslt_min_m)
    backend.set_swiglu_cublaslt_min_m(static_cast<int>(*s.swiglu_cublaslt_min_m));
  if (s.matmul_tuning == "0") backend.set_tuning(false);
  if (s.matmul_tuning == "gemv") {
    backend.set_gemv_max_m(8);
    backend.set_gemv_max_weight_bytes(INT64_MAX);
  }
}

}  // namespace ib::cuda
