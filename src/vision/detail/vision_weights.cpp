// Vision tower weight slots: allocation, loading from a checkpoint, seeding.
#include "vision/detail/vision_weights.h"

namespace ib::detail {

Result<Tensor> VisionWeightBuilder::add(const std::string& name, std::vector<int64_t> dims,
                                        std::vector<int64_t> stored, bool gain) {
  Tensor probe;
  probe.dtype = backend_.activation_dtype();
  probe.rank = static_cast<int>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) probe.shape[i] = dims[i];
  auto buffer = backend_.alloc(probe.bytes(), MemoryTag::kWeights);
  if (!buffer.ok()) return buffer.error();
  probe.data = buffer->data();
  bytes_ += static_cast<int64_t>(buffer->bytes());
  storage_.push_back(std::move(*buffer));
  if (!name.empty())
    slots_.push_back(WeightSlot{name, stored.empty() ? dims : stored, probe, gain});
  return probe;
}

Status load_slots(Backend& backend, const SafetensorsCheckpoint& checkpoint,
                  const std::vector<WeightSlot>& slots, std::string_view reader,
                  std::string_view saver) {
  for (const WeightSlot& slot : slots) {
    if (!checkpoint.contains(slot.name)) {
      return user_error("the checkpoint has no " + slot.name + " " + shape_string(slot.shape) +
                        ", which " + std::string(reader) + " reads; " + std::string(saver) +
                        " names it so");
    }
    auto ref = checkpoint.get(slot.name);
    if (!ref.ok()) return ref.error();
    if (ref->shape != slot.shape) {
      return user_error(slot.name + " is " + shape_string(ref->shape) + " in the checkpoint, " +
                        shape_string(slot.shape) + " by config.json's vision_config");
    }
    backend.copy_from_host(slot.dst, ref->data, ref->dtype);
  }
  return Ok{};
}

Result<bool> older_layout(const SafetensorsCheckpoint& checkpoint,
                          const std::array<std::string, 2>& names, std::string_view what) {
  if (checkpoint.contains(names[0])) return false;
  if (checkpoint.contains(names[1])) return true;
  return user_error("the checkpoint has neither " + names[0] + " nor " + names[1] + ": " +
                    std::string(what));
}

void seed_slots(Backend& backend, const std::vector<WeightSlot>& slots, uint64_t seed,
                float scale) {
  uint64_t stream = 0;
  for (const WeightSlot& slot : slots) {
    backend.fill_uniform(slot.dst, seed, stream++, slot.gain ? 0.1f : scale);
    if (slot.gain) backend.affine(slot.dst, 1.0f, 1.0f);
  }
}

void features_to_host(Backend& backend, const Tensor& features, std::vector<float>& out) {
  out.resize(static_cast<size_t>(features.numel()));
  if (features.dtype == DType::kF32) {
    backend.copy_to_host(features, out.data());
    return;
  }
  IB_ASSERT(features.dtype == DType::kBF16 || features.dtype == DType::kF16,
            "features_to_host: f32, bf16 or f16 features");
  std::vector<uint16_t> bits(out.size());
  backend.copy_to_host(features, bits.data());
  const bool bf16 = features.dtype == DType::kBF16;
  for (size_t i = 0; i < bits.size(); ++i) {
    out[i] = bf16 ? bf16_bits_to_f32(bits[i]) : f16_bits_to_f32(bits[i]);
  }
}

}  // namespace ib::detail
