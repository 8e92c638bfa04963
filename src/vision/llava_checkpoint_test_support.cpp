// A tiny LLaVA checkpoint on disk (llava_checkpoint_test_support.h).
#include "vision/llava_checkpoint_test_support.h"

#include <cstddef>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "model/hf_config.h"
#include "model/safetensors.h"
#include "vision/vlm_test_support.h"

namespace ib::llava_test {
using vlm_test::bytes_of;

std::string tiny_llava_config(int vocab_size, int image_token_id) {
  return R"({"architectures": ["LlavaForConditionalGeneration"], "image_token_index": )" +
         std::to_string(image_token_id) + R"(, "projector_hidden_act": "gelu",
  "text_config": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "vocab_size": )" +
         std::to_string(vocab_size) + R"(, "max_position_embeddings": 256,
                  "rms_norm_eps": 1e-5, "eos_token_id": )" +
         std::to_string(vocab_size - 1) + R"(},
  "vision_config": {"hidden_size": 32, "image_size": 28, "intermediate_size": 48,
                    "model_type": "clip_vision_model", "num_attention_heads": 4,
                    "num_hidden_layers": 3, "patch_size": 7},
  "vision_feature_layer": -2, "vision_feature_select_strategy": "default"})";
}

TinyLlava write_tiny_llava(const std::filesystem::path& dir, std::string_view config_json,
                           bool legacy) {
  TinyLlava m;
  m.dir = dir;
  std::filesystem::create_directories(m.dir);
  std::ofstream(m.dir / "config.json") << config_json;
  m.llava = tiny_config(config_json);
  const int64_t s = m.llava.vision.image_size_px;
  std::ofstream(m.dir / "preprocessor_config.json")
      << "{\"size\": " << s << ", \"crop_size\": " << s << "}";
  auto text_config = parse_hf_config(config_json, m.dir.string());
  IB_ASSERT(text_config.ok(), text_config.ok() ? "" : text_config.error().message.c_str());
  m.vision = host_weights(m.llava, 31);
  m.vision.erase("model.language_model.norm.weight");  // host_weights' stand-in

  std::vector<SafetensorsWriteTensor> tensors;
  auto add = [&](std::string n, std::vector<int64_t> shape, const std::vector<float>& v) {
    if (legacy) {
      for (const auto& [from, to] : std::map<std::string, std::string>{
               {"model.language_model.", "language_model.model."},
               {"lm_head.", "language_model.lm_head."},
               {"model.vision_tower.", "vision_tower."},
               {"model.multi_modal_projector.", "multi_modal_projector."}}) {
        if (n.starts_with(from)) {
          n = to + n.substr(from.size());
          break;
        }
      }
    }
    tensors.push_back({n, DType::kF32, std::move(shape), bytes_of(v)});
  };
  for (const auto& [n, v] : m.vision) add(n, shape_of(n, m.llava), v);

  const ModelConfig& c = *text_config;
  IB_ASSERT(int64_t{c.num_heads} * c.head_dim == c.hidden_size,
            "the tiny LLaVA's text model has q width = hidden size");
  vlm_test::TinyText dims;
  dims.d = c.hidden_size;
  dims.kv_width = int64_t{c.num_kv_heads} * c.head_dim;
  dims.f = c.intermediate_size;
  dims.vocab = c.vocab_size;
  dims.layers = c.num_layers;
  m.text = vlm_test::tiny_text_model(dims, 77, add);
  IB_ASSERT(write_safetensors((m.dir / "model.safetensors").string(), tensors).ok(),
            "cannot write the tiny LLaVA");
  return m;
}

Prompt make_prompt(const LlavaConfig& llava, int images, uint64_t seed, uint64_t pixel_seed,
                   int32_t image_token) {
  Prompt p;
  Rng rng(seed);
  auto text = [&](int n) {
    for (int i = 0; i < n; ++i) p.tokens.push_back(static_cast<int32_t>(10 + rng.next_u64() % 90));
  };
  text(3);
  const std::vector<float> pixels = random_pixels(images, llava, pixel_seed);
  const auto per = pixels.size() / static_cast<size_t>(images);
  for (int i = 0; i < images; ++i) {
    ImageInput image;
    image.start_pos = static_cast<int>(p.tokens.size());
    image.pixel_values.assign(pixels.begin() + static_cast<std::ptrdiff_t>(i * per),
                              pixels.begin() + static_cast<std::ptrdiff_t>((i + 1) * per));
    p.images.push_back(std::move(image));
    p.tokens.insert(p.tokens.end(), static_cast<size_t>(llava.tokens_per_image()), image_token);
    text(2 + i);
  }
  return p;
}

}  // namespace ib::llava_test
