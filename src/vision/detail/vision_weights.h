// Private to vision/: a vision tower's weights as slots (a checkpoint name, its stored shape and
// the backend tensor it fills), allocated one buffer each, then filled from a checkpoint or
// seeded. clip_vision_tower.cpp and qwen2vl_vision_tower.cpp build their schemas with it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "core/result.h"
#include "model/safetensors.h"

namespace ib::detail {

struct WeightSlot {
  std::string name;            // the checkpoint's
  std::vector<int64_t> shape;  // as stored
  Tensor dst;
  bool gain = false;  // a LayerNorm weight (seeded around 1)
};

// Allocates tensors in act into storage (bytes counts them) and lists the slots that fill them.
class VisionWeightBuilder {
 public:
  VisionWeightBuilder(Backend& backend, std::vector<Buffer>& storage, int64_t& bytes)
      : backend_(backend), storage_(storage), bytes_(bytes) {}

  // A tensor of shape dims filled from `name` stored as `stored` (dims when empty; no slot when
  // name is empty: a fused weight whose parts come from add_part).
  Result<Tensor> add(const std::string& name, std::vector<int64_t> dims,
                     std::vector<int64_t> stored = {}, bool gain = false);
  // add() into `into`, its failure kept for status() (the first one): a schema reads as a list.
  void add_into(Tensor& into, const std::string& name, std::vector<int64_t> dims,
                std::vector<int64_t> stored = {}, bool gain = false) {
    auto r = add(name, std::move(dims), std::move(stored), gain);
    if (r.ok()) into = *r;
    if (!r.ok() && status_.ok()) status_ = r.error();
  }
  void add_part(const std::string& name, std::vector<int64_t> shape, Tensor dst) {
    slots_.push_back(WeightSlot{name, std::move(shape), dst, false});
  }
  const std::vector<WeightSlot>& slots() const { return slots_; }
  const Status& status() const { return status_; }

 private:
  Backend& backend_;
  std::vector<Buffer>& storage_;
  int64_t& bytes_;
  std::vector<WeightSlot> slots_;
  Status status_ = Ok{};
};

// Copies every slot from the checkpoint, which must hold it with its shape. Errors name the
// tensor; reader ("the LLaVA vision tower") and saver ("a LlavaForConditionalGeneration
// checkpoint saved by transformers 5") complete them.
Status load_slots(Backend& backend, const SafetensorsCheckpoint& checkpoint,
                  const std::vector<WeightSlot>& slots, std::string_view reader,
                  std::string_view saver);

// Which of two layouts a checkpoint is in: false when it holds names[0] (transformers 5's),
// true when only names[1] (an older layout's); a user error naming both when it holds neither,
// ending with what: "no LLaVA CLIP vision tower (is it a ... checkpoint?)".
Result<bool> older_layout(const SafetensorsCheckpoint& checkpoint,
                          const std::array<std::string, 2>& names, std::string_view what);

// Seeds every slot uniform in [-scale, scale], LayerNorm gains in [0.9, 1.1] (tests).
void seed_slots(Backend& backend, const std::vector<WeightSlot>& slots, uint64_t seed, float scale);

// An encoder's output: features (rows, Dt) in act (f32, bf16 or f16) on the backend, into out as
// host floats (resized to its element count).
void features_to_host(Backend& backend, const Tensor& features, std::vector<float>& out);

}  // namespace ib::detail
