// End to end with a tiny Qwen2-VL checkpoint (seeded weights, 14 px patches merged 2 x 2 as the
// published model's, Qwen2-VL's preprocessor bounds, the byte tokenizer). `run` benchmarks
// --dataset-name random-mm and JSONL image files, each image's visual tokens its smart-resized
// pixels / (28 x 28), with the per-request records LLaVA's runs have; `serve` takes chat image_url
// parts, its greedy completion equal to the engine's driven directly with
// prepare_qwen2vl_request; bad images are 400s naming their part, bad workloads exit 2.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "cli/detail/vlm_e2e_support.h"
#include "model/safetensors.h"
#include "model/tokenizer.h"
#include "server/detail/test_support.h"
#include "vision/qwen2vl_encoder.h"
#include "vision/qwen2vl_test_support.h"
#include "vision/vision_test_support.h"
#include "vision/vlm_test_support.h"

namespace ib::testing {
namespace {

using nlohmann::json;

// The vocabulary covers the byte tokenizer (ids 3..258); the image ids sit at its top.
constexpr int32_t kVisionStart = 296, kVisionEnd = 297, kImagePad = 298;

const char* const kConfig = R"({
  "architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
  "image_token_id": 298, "vision_start_token_id": 296, "vision_end_token_id": 297,
  "video_token_id": 299,
  "text_config": {"model_type": "qwen2_vl_text", "hidden_size": 64, "intermediate_size": 128,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "vocab_size": 300, "max_position_embeddings": 1024, "rms_norm_eps": 1e-6,
                  "rope_theta": 10000.0, "eos_token_id": 295, "tie_word_embeddings": false,
                  "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}},
  "vision_config": {"depth": 2, "embed_dim": 32, "hidden_size": 64, "hidden_act": "quick_gelu",
                    "mlp_ratio": 2, "num_heads": 4, "in_channels": 3, "patch_size": 14,
                    "spatial_merge_size": 2, "temporal_patch_size": 2}})";

// Qwen2-VL-7B-Instruct's preprocessor_config.json: 28 px a visual token's side.
const char* const kPreprocessor = R"({
  "image_processor_type": "Qwen2VLImageProcessor", "do_resize": true, "resample": 3,
  "do_rescale": true, "rescale_factor": 0.00392156862745098, "do_normalize": true,
  "image_mean": [0.48145466, 0.4578275, 0.40821073],
  "image_std": [0.26862954, 0.26130258, 0.27577711],
  "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
  "merge_size": 2})";

// Visual tokens of images (height x width) after smart_resize, (h / 28) (w / 28):
// 60 x 90 -> 56 x 84: 6; 100 x 150 -> 112 x 140: 20; 300 x 200 -> 308 x 196: 77.
constexpr int kTokens60x90 = 6, kTokens100x150 = 20, kTokens300x200 = 77;

// The tiny model's KV cache bytes per token: 2 layers x (K, V) x 2 KV heads x 16 dims x fp32.
constexpr int64_t kKvBytesPerToken = 2 * 2 * 2 * 16 * 4;

void write_tiny_qwen2vl(const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << kConfig;
  std::ofstream(dir / "preprocessor_config.json") << kPreprocessor;
  const auto config = parse_qwen2vl_config(kConfig, "config.json");
  ASSERT_TRUE(config.ok()) << config.error().message;
  std::vector<SafetensorsWriteTensor> tensors;
  auto add = [&](const std::string& n, std::vector<int64_t> shape, const std::vector<float>& v) {
    tensors.push_back({n, DType::kF32, std::move(shape), vlm_test::bytes_of(v)});
  };
  for (const auto& [n, v] : qwen2vl_test::vision_weights(*config, 41)) {
    add(n, qwen2vl_test::vision_shape(n, *config), v);
  }
  vlm_test::tiny_text_model({64, 32, 128, 300, 2, /*qkv_bias=*/true}, 78, add);
  ASSERT_TRUE(write_safetensors((dir / "model.safetensors").string(), tensors).ok());
}

void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

std::string png_url(const Image& image) {
  return test::data_url("image/png",
                        test::encode_png(image.rgb, image.width_px, image.height_px, 3));
}

json image_part(const std::string& url) {
  return {{"type", "image_url"}, {"image_url", {{"url", url}}}};
}

// A chat call whose one user message holds "describe " then the parts.
std::string chat(const std::vector<json>& parts, int max_tokens = 8) {
  json content = json::array({{{"type", "text"}, {"text", "describe "}}});
  for (const json& p : parts) content.push_back(p);
  return json{{"messages", {{{"role", "user"}, {"content", content}}}},
              {"max_tokens", max_tokens},
              {"temperature", 0},
              {"ignore_eos", true}}
      .dump();
}

// The greedy tokens of the checkpoint's engine for one prompt (one <|image_pad|> per image
// between <|vision_start|> and <|vision_end|>) and its images, prepared by
// prepare_qwen2vl_request.
std::vector<int32_t> engine_tokens(const fs::path& dir, std::vector<int32_t> prompt,
                                   const std::vector<Image>& images, int max_tokens) {
  CpuBackend backend(1);
  ModelConfig model;
  auto engine = vlm_test::load_engine(dir.string(), backend, 512, 0, 1024, model);
  IB_ASSERT(engine.ok(), "load the engine");
  auto files = read_qwen2vl_files(dir.string());
  IB_ASSERT(files.ok(), "read the Qwen2-VL files");
  auto encoder = load_qwen2vl_encoder(dir.string(), files->config, backend);
  IB_ASSERT(encoder.ok(), "load the encoder");
  IB_ASSERT((*engine)->set_vision_encoder(std::move(*encoder)).ok(), "set the encoder");
  std::vector<Qwen2VlPixels> pixels;
  for (const Image& image : images) {
    auto p = preprocess_qwen2vl(image, files->preprocess, ImageBackend::kTorchvision);
    IB_ASSERT(p.ok(), "preprocess");
    pixels.push_back(std::move(*p));
  }
  GenerationRequest r;
  r.id = 1;
  r.max_tokens = max_tokens;
  r.prompt_tokens = std::move(prompt);
  IB_ASSERT(prepare_qwen2vl_request(files->config, std::move(pixels), r).ok(), "prepare");
  IB_ASSERT((*engine)->add_request(std::move(r)).ok(), "add the request");
  std::vector<int32_t> out;
  while ((*engine)->has_unfinished()) {
    auto step = (*engine)->step();
    IB_ASSERT(step.ok(), "step");
    for (const TokenEvent& e : step->events) out.push_back(e.token);
  }
  return out;
}

class Qwen2VlE2e : public VlmE2e {
 protected:
  fs::path model_dir() {
    const fs::path dir = root_ / "qwen2vl";
    if (!fs::exists(dir)) write_tiny_qwen2vl(dir);
    return dir;
  }
  // `run` on the tiny Qwen2-VL, one run, its results in out.
  int run_qwen2vl(std::vector<std::string> args, const fs::path& out) {
    return run_vlm(model_dir(), std::move(args), out);
  }
};

TEST_F(Qwen2VlE2e, RunRandomMmGivesEachResolutionItsVisualTokens) {
  const fs::path out = root_ / "mm";
  ASSERT_EQ(run_qwen2vl({"--dataset-name", "random-mm", "--random-mm-bucket-config",
                         "{(100, 150, 1): 0.5, (300, 200, 1): 0.5}", "--num-prompts", "8",
                         "--input-len", "64", "--output-len", "4", "--batch-size", "4"},
                        out),
            0)
      << err();
  const std::vector<json> lines = measured_lines(out);
  ASSERT_EQ(lines.size(), 8u);
  std::set<int> seen;
  int64_t total = 0;
  for (const json& j : lines) {
    const int visual = j["visual_tokens"];
    seen.insert(visual);
    total += visual;
    EXPECT_TRUE(visual == kTokens100x150 || visual == kTokens300x200) << j;
    EXPECT_EQ(j["n_in"], 64 + visual + 2) << j;  // with <|vision_start|> and <|vision_end|>
    EXPECT_EQ(j["kv_bytes"], kKvBytesPerToken * (j["n_in"].get<int>() + j["n_out"].get<int>()));
    const double sum = j["ttft_queue_ms"].get<double>() + j["encode_ms"].get<double>() +
                       j["ttft_prefill_ms"].get<double>();
    EXPECT_NEAR(sum, j["ttft_ms"].get<double>(), 1e-6) << j;
    EXPECT_GT(j["encode_ms"].get<double>(), 0) << j;
  }
  EXPECT_EQ(seen.size(), 2u) << "both resolutions are drawn";
  const json result = json::parse(text_of(out / "result.json"));
  EXPECT_EQ(result["completed"], 8);
  EXPECT_EQ(result["failed"], 0);
  EXPECT_EQ(result["total_visual_tokens"], total);
  EXPECT_EQ(result["total_input_tokens"], 8 * (64 + 2) + total);
  EXPECT_GT(result["mean_encode_ms"].get<double>(), 0);
  EXPECT_GT(result["mean_ttft_prefill_ms"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(result["mean_visual_kv_bytes"].get<double>(),
                   static_cast<double>(kKvBytesPerToken * total) / 8);
}

TEST_F(Qwen2VlE2e, RunJsonlLinesWithImageFiles) {
  write_bytes(root_ / "a.png",
              test::encode_png(test::pattern_image(90, 60, 5, true).rgb, 90, 60, 3));
  write_bytes(root_ / "b.jpg",
              test::encode_jpeg(test::pattern_image(150, 100, 7, true).rgb, 150, 100, 3, 90));
  std::ofstream(root_ / "data.jsonl") << R"({"prompt": "what is this?", "image": "a.png"}
{"prompt": "and these?", "images": ["a.png", "b.jpg"]}
{"prompt": "no image here"}
)";
  const fs::path out = root_ / "jsonl";
  ASSERT_EQ(run_qwen2vl({"--dataset-name", "jsonl", "--dataset-path",
                         (root_ / "data.jsonl").string(), "--num-prompts", "3", "--output-len", "3",
                         "--batch-size", "3", "--num-warmups", "0"},
                        out),
            0)
      << err();
  const std::vector<json> lines = measured_lines(out);
  ASSERT_EQ(lines.size(), 3u);
  std::map<int, json> by_prompt;
  for (const json& j : lines) by_prompt[j["prompt_index"].get<int>()] = j;
  EXPECT_EQ(by_prompt[0]["visual_tokens"], kTokens60x90);
  EXPECT_EQ(by_prompt[0]["n_in"], 13 + kTokens60x90 + 2);  // "what is this?" is 13 bytes
  EXPECT_EQ(by_prompt[1]["visual_tokens"], kTokens60x90 + kTokens100x150);
  EXPECT_EQ(by_prompt[1]["n_in"], 10 + kTokens60x90 + kTokens100x150 + 4);
  EXPECT_FALSE(by_prompt[2].contains("visual_tokens"));
  EXPECT_EQ(by_prompt[2]["n_in"], 13);
  const json result = json::parse(text_of(out / "result.json"));
  EXPECT_EQ(result["total_visual_tokens"], 2 * kTokens60x90 + kTokens100x150);
}

TEST_F(Qwen2VlE2e, ServeMatchesTheEngineDrivenDirectlyAndNamesBadParts) {
  const fs::path dir = model_dir();
  const uint16_t port = start_server({"--model", dir.string(), "--kv-cache-memory", "8MiB",
                                      "--num-threads", "1", "--limit-mm-per-prompt", "image=2"});
  ASSERT_NE(port, 0);
  auto call = [&](const std::string& body) {
    return http_call(port, "POST", "/v1/chat/completions", body);
  };
  const Image small = test::pattern_image(90, 60, 5, true);
  const Image large = test::pattern_image(150, 100, 9, true);

  // Each image is its visual tokens between <|vision_start|> and <|vision_end|>.
  const auto text_only = call(chat({}));
  ASSERT_EQ(text_only.status, 200) << text_only.body;
  const int text_tokens = json::parse(text_only.body)["usage"]["prompt_tokens"];
  const auto one = call(chat({image_part(png_url(small))}));
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(json::parse(one.body)["usage"]["prompt_tokens"], text_tokens + kTokens60x90 + 2);
  const auto two = call(chat({image_part(png_url(small)), image_part(png_url(large))}));
  ASSERT_EQ(two.status, 200) << two.body;
  EXPECT_EQ(json::parse(two.body)["usage"]["prompt_tokens"],
            text_tokens + kTokens60x90 + kTokens100x150 + 4);
  const auto counted = http_call(port, "POST", "/tokenize", chat({image_part(png_url(small))}));
  ASSERT_EQ(counted.status, 200) << counted.body;
  EXPECT_EQ(json::parse(counted.body)["count"], text_tokens + kTokens60x90 + 2);

  // The completion is the engine's for the prompt the server renders ("<|user|>\n" content
  // "\n<|assistant|>\n", the byte tokenizer), the image wrapped as the chat template does.
  const auto tokenizer = make_byte_tokenizer();
  std::vector<int32_t> prompt = tokenizer->encode("<|user|>\ndescribe ");
  prompt.insert(prompt.end(), {kVisionStart, kImagePad, kVisionEnd});
  const std::vector<int32_t> tail = tokenizer->encode("\n<|assistant|>\n");
  prompt.insert(prompt.end(), tail.begin(), tail.end());
  const std::vector<int32_t> want = engine_tokens(dir, prompt, {small}, 8);
  ASSERT_EQ(want.size(), 8u);
  const std::string want_text =
      json::parse(
          json(tokenizer->decode(want)).dump(-1, ' ', false, json::error_handler_t::replace))
          .get<std::string>();
  EXPECT_EQ(json::parse(one.body)["choices"][0]["message"]["content"], want_text);

  // Bad images: a 400 naming the part, and the server goes on.
  const Image tiny = test::pattern_image(20, 20, 1, false);
  expect_400(call(chat({image_part(png_url(tiny))})), "messages[0].content[1]", "at least 28 px");
  expect_400(call(chat({image_part(png_url(small)), image_part(png_url(small)),
                        image_part(png_url(small))})),
             "messages[0].content[3]", "more than 2 image(s)");
  expect_400(call(chat({image_part("data:image/png;base64,@@@@")})), "messages[0].content[1]",
             "base64");
  const auto after = call(chat({image_part(png_url(small))}));
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(json::parse(after.body)["choices"][0]["message"]["content"], want_text);
}

TEST_F(Qwen2VlE2e, BadImageWorkloadsExit2) {
  const std::string dir = model_dir().string();
  const fs::path never = root_ / "never";
  expect_refused(
      {"run", "--model", dir, "--dataset-name", "random-mm", "--random-mm-bucket-config",
       "{(20, 300, 1): 1}", "--num-prompts", "2", "--runs", "1", "--result-dir", never.string()},
      "a random 300 x 20 px image (--random-mm-bucket-config): the image is 300 x 20 "
      "px; Qwen2-VL needs both sides at least 28 px",
      never);
}

}  // namespace
}  // namespace ib::testing
