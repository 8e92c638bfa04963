// qwen2vl_logits MODEL_DIR IMAGE torchvision|pil PROMPT OUT_PREFIX: one image through a Qwen2-VL
// checkpoint on the CPU backend, the whole model as the engine runs it (preprocessor_config.json
// and config.json read as the CLI does, the vision tower as the engine's VisionEncoder, the
// language model with M-RoPE). PROMPT: comma-separated token ids holding one <|image_pad|> (the
// config's image_token_id) where the image goes; it is expanded to the image's visual tokens.
// Writes OUT_PREFIX.pixels.f32 (patch rows, 3 T p p), OUT_PREFIX.logits.f32 (expanded prompt
// length, vocabulary): the logits after every prompt token, float32 little-endian; prints one
// JSON line (grid, tokens, prompt length). tools/compare_qwen2vl.py compares both with
// transformers. Exit 2 on a user error.
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/fs.h"
#include "model/hf_config.h"
#include "tool_io.h"
#include "vision/qwen2vl_encoder.h"

namespace {

int fail(const ib::Error& error) {
  return ib::vision_tool::fail("qwen2vl_logits", error);
}

ib::Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > 2147483647L) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return ib::user_error("PROMPT: '" + item + "' is not a token id; give ids like 3,4,5");
    }
  }
  if (ids.empty()) return ib::user_error("PROMPT is empty; give comma-separated token ids");
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr,
                 "usage: qwen2vl_logits MODEL_DIR IMAGE torchvision|pil PROMPT OUT_PREFIX\n");
    return 2;
  }
  const std::string dir = argv[1], prefix = argv[5];
  auto files = ib::read_qwen2vl_files(dir);
  if (!files.ok()) return fail(files.error());
  auto backend_kind = ib::parse_image_backend(argv[3]);
  if (!backend_kind.ok()) return fail(backend_kind.error());
  auto ids = parse_ids(argv[4]);
  if (!ids.ok()) return fail(ids.error());
  auto image = ib::vision_tool::read_image(argv[2]);
  if (!image.ok()) return fail(image.error());
  auto pixels = ib::preprocess_qwen2vl(*image, files->preprocess, *backend_kind);
  if (!pixels.ok()) return fail(pixels.error());
  if (auto s = ib::vision_tool::write_floats(prefix + ".pixels.f32", pixels->values.data(),
                                             pixels->values.size());
      !s.ok()) {
    return fail(s.error());
  }
  const auto grid = pixels->grid_thw;
  const int64_t tokens = pixels->tokens(files->config.vision.spatial_merge_size);

  auto config_text = ib::read_file(dir + "/config.json");
  if (!config_text.ok()) return fail(config_text.error());
  auto model = ib::parse_hf_config(*config_text, dir);
  if (!model.ok()) return fail(model.error());
  ib::CpuBackend backend(0);
  ib::WeightOptions weights;
  weights.format = ib::LoadFormat::kSafetensors;
  weights.path = dir;
  ib::EngineConfig config;
  config.max_model_len = static_cast<int>(ids->size() + static_cast<size_t>(tokens) + 8);
  config.max_num_batched_tokens = config.max_model_len;
  config.max_num_seqs = 1;
  config.cpu_kv_cache_bytes = int64_t{256} << 20;
  auto engine = ib::create_engine(*model, weights, config, backend);
  if (!engine.ok()) return fail(engine.error());
  auto encoder = ib::load_qwen2vl_encoder(dir, files->config, backend);
  if (!encoder.ok()) return fail(encoder.error());
  if (auto s = (*engine)->set_vision_encoder(std::move(*encoder)); !s.ok()) return fail(s.error());
  ib::GenerationRequest request;
  request.id = 1;
  request.max_tokens = 1;
  request.prompt_tokens = *ids;
  request.prompt_logits_from = 0;
  std::vector<ib::Qwen2VlPixels> images;
  images.push_back(std::move(*pixels));
  if (auto s = ib::prepare_qwen2vl_request(files->config, std::move(images), request); !s.ok()) {
    return fail(s.error());
  }
  const size_t len = request.prompt_tokens.size();
  if (auto s = (*engine)->add_request(std::move(request)); !s.ok()) return fail(s.error());
  std::vector<float> logits;
  while ((*engine)->has_unfinished()) {
    auto step = (*engine)->step();
    if (!step.ok()) return fail(step.error());
    for (const ib::PromptLogits& p : step->prompt_logits) {
      logits.insert(logits.end(), p.logits.begin(), p.logits.end());
    }
  }
  if (logits.size() != len * static_cast<size_t>(model->vocab_size)) {
    return fail(ib::runtime_error("the engine returned " + std::to_string(logits.size()) +
                                  " prompt logits for " + std::to_string(len) + " positions"));
  }
  if (auto s = ib::vision_tool::write_floats(prefix + ".logits.f32", logits.data(), logits.size());
      !s.ok()) {
    return fail(s.error());
  }
  std::printf(
      "{\"grid\": [%lld, %lld, %lld], \"visual_tokens\": %lld, \"prompt_len\": %zu, "
      "\"vocab\": %d}\n",
      static_cast<long long>(grid[0]), static_cast<long long>(grid[1]),
      static_cast<long long>(grid[2]), static_cast<long long>(tokens), len, model->vocab_size);
  return 0;
}
