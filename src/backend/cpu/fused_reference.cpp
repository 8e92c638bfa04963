#include "backend/cpu/fused_reference.h"

#include "backend/cpu/cpu_backend.h"

namespace ib {

Tensor CpuFusedDecodeReference::scratch(std::vector<float>& storage, int64_t rows, int64_t cols) {
  storage.resize(static_cast<size_t>(rows * cols));
  return Tensor(storage.data(), DType::kF32, {rows, cols});
}

void CpuFusedDecodeReference::add_lora(const Tensor& x, const FusedLora* lora, Tensor out) {
  ++ops_run_;  // every op calls it once
  if (lora != nullptr) cpu_.lora_apply_group(x, lora->slot_ids, lora->targets, lora->scales, out);
}

Tensor CpuFusedDecodeReference::normed(const Tensor& h, const Tensor* gain, float eps) {
  const int64_t k = h.row_size();
  if (gain == nullptr && ones_.size() != static_cast<size_t>(k))
    ones_.assign(static_cast<size_t>(k), 1.0f);
  const Tensor ones(ones_.data(), DType::kF32, {k});
  Tensor out = scratch(normed_, h.rows(), k);
  cpu_.rms_norm(h, gain != nullptr ? *gain : ones, eps, out);
  return out;
}

void CpuFusedDecodeReference::rms_matmul_rope_cache(
    const Tensor& h, const Tensor* gain, const WeightRef& w, const Tensor* bias, float eps,
    const Tensor& positions, const Tensor& slot_mapping, const Tensor& inv_freq,
    const KvCacheLayer& kv, const AttentionShape& shape, Tensor qkv, const FusedLora* lora) {
  const Tensor x = normed(h, gain, eps);
  cpu_.matmul(x, w, bias, qkv);
  add_lora(x, lora, qkv);
  cpu_.rope_and_cache(qkv, positions, slot_mapping, inv_freq, kv, shape);
}

void CpuFusedDecodeReference::rms_matmul_swiglu(const Tensor& h, const Tensor* gain,
                                                const WeightRef& w, float eps, Tensor out,
                                                const FusedLora* lora) {
  const Tensor gate_up = scratch(product_, h.rows(), w.rows());
  const Tensor x = normed(h, gain, eps);
  cpu_.matmul(x, w, nullptr, gate_up);
  add_lora(x, lora, gate_up);
  cpu_.silu_mul(gate_up, out);
}

void CpuFusedDecodeReference::matmul_add(const Tensor& x, const WeightRef& w, Tensor residual,
                                         const FusedLora* lora) {
  const Tensor product = scratch(product_, x.rows(), w.rows());
  cpu_.matmul(x, w, nullptr, product);
  add_lora(x, lora, product);
  cpu_.add(residual, product);
}

}  // namespace ib
