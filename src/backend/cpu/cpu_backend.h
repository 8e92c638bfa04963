// CpuBackend: the fp32 reference implementation of Backend (dense, 8-bit and 4-bit weights,
// backend/weight.h; the mixture-of-experts, multi-head latent attention, LoRA and vision ops; the
// fused decode ops only as their composed reference, for tests), multi-threaded through a
// ThreadPool. Every op runs synchronously on the calling thread plus the pool's workers. Weights
// and activations are fp32 (activation_dtype() == kF32); the factory refuses bf16/fp16 for the CPU.
// Numerics (the contract CUDA kernels are compared against): dot products as cpu::dot_f32
// (detail/dot.h); RMSNorm sums squares the same way and scales by 1 / sqrt(mean + eps); attention
// is a two-pass softmax in fp32; sampling accumulates probabilities in double.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/fused_reference.h"
#include "core/thread_pool.h"

namespace ib {

class CpuBackend final : public Backend,
                         public MoeOps,
                         public MlaOps,
                         public LoraOps,
                         public VisionOps {
 public:
  // num_threads <= 0: one per hardware thread.
  explicit CpuBackend(int num_threads);

  DeviceInfo device_info() const override;
  DType activation_dtype() const override { return DType::kF32; }
  int num_threads() const { return pool_.size(); }
  // Tests: fused_decode_ops() returns the fused decode ops composed of this backend's unfused ones
  // (fused_reference.h), and the experts' combine with the residual add and norm runs as one
  // MoeOps call (moe_experts, then add_rms_norm), so the engine's fused decode steps run here.
  void enable_fused_decode_reference();
  bool fused_decode_reference_enabled() const { return fused_reference_ != nullptr; }
  FusedDecodeOps* fused_decode_ops() override { return fused_reference_.get(); }

  void copy_from_host(Tensor dst, const void* src, DType src_dtype) override;
  void copy_to_host(const Tensor& src, void* dst) override;
  void copy_on_device(Tensor dst, const Tensor& src) override;
  void synchronize() override {}

  void fill_uniform(Tensor dst, uint64_t seed, uint64_t stream, float scale) override;
  void fill_constant(Tensor dst, float value) override;
  void scale_columns(const WeightRef& w, const Tensor& gain) override;

  void embedding(const Tensor& token_ids, const Tensor& table, Tensor out) override;
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor out) override;
  void add_rms_norm(Tensor residual, const Tensor& x, const Tensor& weight, float eps,
                    Tensor out) override;
  void matmul(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out) override;
  bool supports_weight_format(WeightFormat /*format*/) const override {
    return true;  // every format: the CPU is their oracle
  }
  void quantize_weight(const Tensor& dense, const WeightRef& out) override;
  void weight_row_sums(const WeightRef& w, Tensor out) override;
  bool set_matmul_observer(MatmulObserver observer) override {
    observer_ = std::move(observer);
    return true;
  }
  void rope_and_cache(Tensor qkv, const Tensor& positions, const Tensor& slot_mapping,
                      const Tensor& inv_freq, const KvCacheLayer& kv,
                      const AttentionShape& shape) override;
  void attention(const Tensor& qkv, const KvCacheLayer& kv, const AttentionMetadata& meta,
                 const AttentionShape& shape, Tensor out) override;
  void silu_mul(const Tensor& gate_up, Tensor out) override;
  void gelu_tanh_mul(const Tensor& gate_up, Tensor out) override;  // cpu/elementwise.cpp
  void affine(Tensor x, float mul, float add) override;
  void softcap(Tensor x, float cap) override;
  void gather_rows(const Tensor& x, const Tensor& row_ids, Tensor out) override;
  void sample(const Tensor& logits, const SamplingMetadata& meta, Tensor out_tokens) override;

  MoeOps* moe_ops() override { return this; }
  void moe_route(const Tensor& router_logits, bool renormalize, Tensor expert_ids,
                 Tensor expert_weights, Tensor expert_tokens) override;  // cpu/moe.cpp
  void moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& expert_weights,
                   std::span<const WeightRef> gate_up, std::span<const WeightRef> down,
                   Tensor out) override;
  bool routes_grouped() const override { return true; }
  // Every format its matmul takes: each expert goes through it (moe.cpp).
  bool runs_quantized_experts(const QuantizedExperts& experts) const override {
    return supports_weight_format(experts.format);
  }
  void moe_route_grouped(const Tensor& router_logits, const MoeRouting& routing, Tensor expert_ids,
                         Tensor expert_weights, Tensor expert_tokens) override;
  bool fuses_experts_add_norm() const override { return fused_reference_ != nullptr; }
  void moe_experts_add_rms_norm(const Tensor& x, const Tensor& expert_ids,
                                const Tensor& expert_weights, std::span<const WeightRef> gate_up,
                                std::span<const WeightRef> down, Tensor residual,
                                const Tensor& norm_weight, float eps, Tensor normed) override;

  MlaOps* mla_ops() override { return this; }  // cpu/mla.cpp
  void mla_rope_and_cache(Tensor q, Tensor latent, const Tensor& kv_norm, float eps,
                          const Tensor& positions, const Tensor& slot_mapping,
                          const Tensor& inv_freq, const KvCacheLayer& kv,
                          const MlaShape& shape) override;
  void mla_attention(const Tensor& q, const WeightRef& kv_b, const KvCacheLayer& kv,
                     const AttentionMetadata& meta, const MlaShape& shape, Tensor out) override;

  LoraOps* lora_ops() override { return this; }
  void lora_apply(const Tensor& x, const Tensor& slot_ids, const Tensor& a, const Tensor& b,
                  const Tensor& scales, int64_t row_offset, Tensor out) override;  // cpu/lora.cpp
  void lora_lookahead_matrix(const Tensor& a_next, const Tensor& w, const Tensor& a,
                             const Tensor& b, float scale, Tensor m) override;

  VisionOps* vision_ops() override { return this; }  // cpu/vision.cpp
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                  Tensor out) override;
  void add(Tensor x, const Tensor& y) override;
  void activation(Tensor x, VisionActivation act) override;
  void bidirectional_attention(const Tensor& qkv, int64_t seq_len, int num_heads, float scale,
                               Tensor out) override;
  void rotary_rows(Tensor qkv, const Tensor& cos, const Tensor& sin, int num_heads) override;
  void unfold_patches(const Tensor& pixels, int64_t patch, Tensor out) override;

 protected:
  Result<void*> raw_alloc(size_t bytes) override;
  void raw_free(void* ptr, size_t bytes) override;

 private:
  ThreadPool pool_;
  MatmulObserver observer_;
  std::unique_ptr<CpuFusedDecodeReference> fused_reference_;
  std::vector<float> experts_out_;  // moe_experts_add_rms_norm's experts' sum
};

}  // namespace ib
