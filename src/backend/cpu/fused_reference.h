// The fused decode ops (ops.h's FusedDecodeOps) composed of the CPU backend's unfused ops, each as
// ops.h defines it: rms_norm, matmul, rope_and_cache; rms_norm, matmul, silu_mul; matmul, add.
// They make the engine's fused decode steps, which only CUDA runs for speed, run in CI: the
// runner's gain folding (into the weights and the adapters' A), the fused layer loop with its
// LoRA arguments and, under tensor parallelism, the sums over the ranks after a fused op's
// residual add. Off unless a test enables them (CpuBackend::enable_fused_decode_reference); the
// engine never does. A LoRA update is LoraOps::lora_apply_group of the op's matmul input, added
// to its matmul output; FusedLora::next, a hint, is not used (each op computes its own).
#pragma once

#include <vector>

#include "backend/ops.h"

namespace ib {

class CpuBackend;

class CpuFusedDecodeReference final : public FusedDecodeOps {
 public:
  // Steps of up to max_tokens rows fuse (CUDA's fused GEMVs take 8).
  explicit CpuFusedDecodeReference(CpuBackend& cpu, int64_t max_tokens = 8)
      : cpu_(cpu), max_tokens_(max_tokens) {}

  bool fused_decode_fits(const AttentionShape& /*shape*/, int64_t /*hidden_size*/,
                         int64_t /*intermediate_size*/) const override {
    return true;
  }
  bool fused_decode(int64_t num_tokens) const override {
    return num_tokens >= 0 && num_tokens <= max_tokens_;
  }
  bool fused_lora(int64_t /*rank*/) const override { return true; }
  // How many fused ops have run (tests: that a step took them).
  int64_t ops_run() const { return ops_run_; }
  void rms_matmul_rope_cache(const Tensor& h, const Tensor* gain, const WeightRef& w,
                             const Tensor* bias, float eps, const Tensor& positions,
                             const Tensor& slot_mapping, const Tensor& inv_freq,
                             const KvCacheLayer& kv, const AttentionShape& shape, Tensor qkv,
                             const FusedLora* lora) override;
  void rms_matmul_swiglu(const Tensor& h, const Tensor* gain, const WeightRef& w, float eps,
                         Tensor out, const FusedLora* lora) override;
  void matmul_add(const Tensor& x, const WeightRef& w, Tensor residual,
                  const FusedLora* lora) override;

 private:
  // rms_norm(h) * gain (ones where gain is null) into normed_.
  Tensor normed(const Tensor& h, const Tensor* gain, float eps);
  Tensor scratch(std::vector<float>& storage, int64_t rows, int64_t cols);
  void add_lora(const Tensor& x, const FusedLora* lora, Tensor out);

  CpuBackend& cpu_;
  int64_t max_tokens_;
  int64_t ops_run_ = 0;
  std::vector<float> ones_, normed_, product_;
};

}  // namespace ib
