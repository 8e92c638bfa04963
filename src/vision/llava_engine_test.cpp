// LLaVA through the engine on the CPU: a tiny LlavaForConditionalGeneration checkpoint written
// with transformers' tensor names (transformers 5's layout and the llava-hf one), loaded the way
// the CLI does (config.json's text_config through parse_hf_config, the language model through
// the llama architecture, the vision half through load_llava_encoder). The first generated
// token's logits are checked against a double-precision reference of the whole model: the vision
// tower and projector (llava_test_support) into the visual tokens' embeddings, then the Llama
// (engine/detail/reference_model), both written independently of the engine. Prefill runs in
// chunks smaller than an image, so chunks cover parts of images.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "engine/detail/reference_model.h"
#include "engine/engine.h"
#include "model/hf_config.h"
#include "vision/llava_checkpoint_test_support.h"
#include "vision/llava_encoder.h"
#include "vision/llava_test_support.h"
#include "vision/vlm_test_support.h"

namespace ib {
namespace {

using llava_test::TinyLlava;
using llava_test::write_tiny_llava;
using vlm_test::max_abs_diff;

// The tiny vision tower of llava_test_support with a tiny Llama (hidden 64, 2 layers, 4 heads,
// 2 KV heads, FFN 128, vocabulary 101) whose image token is 7.
const std::string kConfig = llava_test::tiny_llava_config(/*vocab_size=*/101, /*image_token_id=*/7);

constexpr int32_t kImageToken = 7;

struct LoadedLlava {
  std::unique_ptr<CpuBackend> backend = std::make_unique<CpuBackend>(2);
  ModelConfig model;
  std::unique_ptr<Engine> engine;
};

// Loads the checkpoint as the CLI does; chunk: --max-num-batched-tokens.
LoadedLlava load(const TinyLlava& m, int chunk, bool with_encoder = true, int kv_blocks = 0) {
  LoadedLlava out;
  auto engine =
      vlm_test::load_engine(m.dir.string(), *out.backend, chunk, kv_blocks, 128, out.model);
  IB_ASSERT(engine.ok(), engine.ok() ? "" : engine.error().message.c_str());
  out.engine = std::move(engine).value();
  if (with_encoder) {
    auto files = read_llava_files(m.dir.string());
    IB_ASSERT(files.ok(), files.ok() ? "" : files.error().message.c_str());
    auto encoder = load_llava_encoder(m.dir.string(), files->config, *out.backend);
    IB_ASSERT(encoder.ok(), encoder.ok() ? "" : encoder.error().message.c_str());
    IB_ASSERT(out.engine->set_vision_encoder(std::move(encoder).value()).ok(), "set encoder");
  }
  return out;
}

using llava_test::Prompt;

// Text, then per image its 16 image tokens and more text (pixels seeded from seed + 1).
Prompt make_prompt(const LlavaConfig& llava, int images, uint64_t seed) {
  return llava_test::make_prompt(llava, images, seed, seed + 1, kImageToken);
}

// The whole model in double: the reference's logits after the prompt's last token, with or
// without the images' embeddings in place of the image token's.
std::vector<double> reference_first_logits(const TinyLlava& m, const ModelConfig& model,
                                           const Prompt& p, bool with_images = true) {
  std::vector<std::vector<double>> embeds(p.tokens.size());
  if (with_images) {
    for (const ImageInput& image : p.images) {
      const llava_test::Matrix rows =
          llava_test::reference_image(m.vision, m.llava, image.pixel_values.data());
      for (size_t r = 0; r < rows.size(); ++r)
        embeds[static_cast<size_t>(image.start_pos) + r] = rows[r];
    }
  }
  return testing::reference_logits(model, m.text, p.tokens, embeds).back();
}

struct FirstToken {
  std::vector<float> logits;
  int visual_tokens = 0;
  int64_t encode_ns = 0;
  std::vector<int32_t> tokens;  // every generated token
};

std::map<uint64_t, FirstToken> run(Engine& engine, int* images_encoded = nullptr) {
  std::map<uint64_t, FirstToken> first;
  for (int step = 0; engine.has_unfinished(); ++step) {
    IB_ASSERT(step < 1000, "the engine did not finish");
    auto out = engine.step();
    IB_ASSERT(out.ok(), out.ok() ? "" : out.error().message.c_str());
    if (images_encoded != nullptr) *images_encoded += out->stats.num_images_encoded;
    for (TokenEvent& e : out->events) {
      if (e.output_index == 0) first[e.request_id] = {e.logits, e.visual_tokens, e.encode_ns, {}};
      first[e.request_id].tokens.push_back(e.token);
    }
  }
  return first;
}

GenerationRequest request_of(uint64_t id, const Prompt& p) {
  GenerationRequest r;
  r.id = id;
  r.prompt_tokens = p.tokens;
  r.images = p.images;
  r.max_tokens = 2;
  return r;
}

TEST(LlavaEngine, FirstLogitsMatchTheDoubleReferenceOfTheWholeModel) {
  for (const bool legacy : {false, true}) {
    SCOPED_TRACE(legacy ? "llava-hf names" : "transformers 5 names");
    const TinyLlava m =
        write_tiny_llava(std::filesystem::temp_directory_path() /
                             (legacy ? "ib_llava_engine_legacy" : "ib_llava_engine"),
                         kConfig, legacy);
    // 8 tokens a step: prefill chunks cover parts of an image, and two requests share steps.
    LoadedLlava l = load(m, 8);
    EXPECT_EQ(l.model.hf_architecture, "LlavaForConditionalGeneration");
    EXPECT_EQ(l.model.hidden_size, 64);
    const Prompt one = make_prompt(m.llava, 1, 3);
    const Prompt two = make_prompt(m.llava, 2, 4);
    ASSERT_TRUE(l.engine->add_request(request_of(1, one)).ok());
    ASSERT_TRUE(l.engine->add_request(request_of(2, two)).ok());
    int encoded = 0;
    const auto first = run(*l.engine, &encoded);
    EXPECT_EQ(encoded, 3);  // each image once
    ASSERT_EQ(first.size(), 2u);
    for (const auto& [id, prompt] : std::map<uint64_t, const Prompt*>{{1, &one}, {2, &two}}) {
      const FirstToken& got = first.at(id);
      EXPECT_EQ(got.visual_tokens, 16 * static_cast<int>(prompt->images.size()));
      EXPECT_GT(got.encode_ns, 0);
      const std::vector<double> want = reference_first_logits(m, l.model, *prompt);
      double largest = 0;
      for (double x : want) largest = std::max(largest, std::abs(x));
      ASSERT_EQ(got.logits.size(), want.size());
      EXPECT_GT(largest, 0.5);
      EXPECT_LE(max_abs_diff(got.logits, want), 1e-4 * std::max(1.0, largest)) << "request " << id;
      // The check can fail: without the images the reference is far from the engine.
      const std::vector<double> text_only = reference_first_logits(m, l.model, *prompt, false);
      EXPECT_GT(max_abs_diff(got.logits, text_only), 1e-2) << "request " << id;
    }
    std::filesystem::remove_all(m.dir);
  }
}

// A pool too small for both requests at once: one is preempted and recomputed; its images are
// not encoded again and its first logits are still the reference's.
TEST(LlavaEngine, APreemptedRequestKeepsItsImagesEmbeddings) {
  const TinyLlava m = write_tiny_llava(
      std::filesystem::temp_directory_path() / "ib_llava_engine_preempt", kConfig, false);
  const Prompt a = make_prompt(m.llava, 2, 11);
  const Prompt b = make_prompt(m.llava, 2, 12);
  auto start = [&](Engine& engine) {
    for (const auto& [id, prompt] : std::map<uint64_t, const Prompt*>{{1, &a}, {2, &b}}) {
      GenerationRequest r = request_of(id, *prompt);
      r.max_tokens = 20;  // 60 tokens each: the first's decode needs the blocks the second holds
      ASSERT_TRUE(engine.add_request(std::move(r)).ok());
    }
  };
  LoadedLlava roomy = load(m, 8);
  start(*roomy.engine);
  const auto unpreempted = run(*roomy.engine);
  EXPECT_EQ(roomy.engine->stats().preemptions, 0);
  LoadedLlava l = load(m, 8, true, /*kv_blocks=*/4);
  start(*l.engine);
  int encoded = 0;
  const auto first = run(*l.engine, &encoded);
  EXPECT_GT(l.engine->stats().preemptions, 0);
  EXPECT_EQ(encoded, 4);
  for (const uint64_t id : {1, 2}) {
    ASSERT_EQ(first.at(id).tokens.size(), 20u);
    EXPECT_EQ(first.at(id).tokens, unpreempted.at(id).tokens) << "request " << id;
  }
  for (const auto& [id, prompt] : std::map<uint64_t, const Prompt*>{{1, &a}, {2, &b}}) {
    const std::vector<double> want = reference_first_logits(m, l.model, *prompt);
    double largest = 0;
    for (double x : want) largest = std::max(largest, std::abs(x));
    EXPECT_LE(max_abs_diff(first.at(id).logits, want), 1e-4 * std::max(1.0, largest))
        << "request " << id;
  }
  std::filesystem::remove_all(m.dir);
}

TEST(LlavaEngine, OneChunkEqualsManyChunks) {
  const TinyLlava m = write_tiny_llava(
      std::filesystem::temp_directory_path() / "ib_llava_engine_chunks", kConfig, false);
  const Prompt p = make_prompt(m.llava, 2, 9);
  std::vector<std::vector<float>> logits;
  for (const int chunk : {64, 5}) {
    LoadedLlava l = load(m, chunk);
    ASSERT_TRUE(l.engine->add_request(request_of(1, p)).ok());
    logits.push_back(run(*l.engine).at(1).logits);
  }
  double worst = 0;
  for (size_t i = 0; i < logits[0].size(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(logits[0][i] - logits[1][i])));
  EXPECT_LE(worst, 1e-4);
  std::filesystem::remove_all(m.dir);
}

TEST(LlavaEngine, TheLlava15ConfigIsALlava) {
  const char* root = std::getenv("INFERBENCH_SOURCE_DIR");
  std::ifstream in(std::filesystem::path(root != nullptr ? root : ".") /
                   "src/vision/testdata/llava-1.5-7b-config.json");
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(json.empty()) << "run from the source tree or set INFERBENCH_SOURCE_DIR";
  auto c = parse_hf_config(json, "llava-1.5-7b");
  ASSERT_TRUE(c.ok()) << c.error().message;
  // The published file's text_config leaves the sizes to LlamaConfig's defaults (hf_config_test
  // checks them): a Llama-7B.
  EXPECT_TRUE(is_llava(*c));
  EXPECT_EQ(c->num_layers, 32);
  EXPECT_EQ(c->vocab_size, 32064);
  EXPECT_FALSE(c->tie_word_embeddings);
}

TEST(LlavaEngine, RefusesImagesItCannotPlace) {
  const TinyLlava m = write_tiny_llava(
      std::filesystem::temp_directory_path() / "ib_llava_engine_refusals", kConfig, false);
  const Prompt p = make_prompt(m.llava, 1, 5);
  {
    LoadedLlava text_only = load(m, 64, /*with_encoder=*/false);
    const Status s = text_only.engine->add_request(request_of(1, p));
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("takes no images"), std::string::npos) << s.error().message;
  }
  LoadedLlava l = load(m, 64);
  auto refused = [&](GenerationRequest r, const std::string& words) {
    const Status s = l.engine->add_request(std::move(r));
    ASSERT_FALSE(s.ok()) << words;
    EXPECT_EQ(s.error().kind, ErrorKind::kUser);
    EXPECT_NE(s.error().message.find(words), std::string::npos) << s.error().message;
  };
  GenerationRequest r = request_of(1, p);
  r.images[0].pixel_values.pop_back();
  refused(r, "pixel values");
  r = request_of(1, p);
  r.images[0].start_pos += 1;
  refused(r, "not the image token");
  r = request_of(1, p);
  r.images.clear();
  r.images.push_back(p.images[0]);
  r.prompt_tokens.insert(r.prompt_tokens.end(), 16, kImageToken);
  refused(r, "image tokens but its 1 image(s) take 16");
  EXPECT_TRUE(l.engine->add_request(request_of(1, p)).ok());
  // Text only: the image token id is an ordinary token then (random prompts draw it).
  r = request_of(2, p);
  r.images.clear();
  EXPECT_TRUE(l.engine->add_request(r).ok());

  // A preprocessor whose crop is not the tower's image size is another checkpoint's.
  std::ofstream(m.dir / "preprocessor_config.json") << R"({"size": 32, "crop_size": 32})";
  auto files = read_llava_files(m.dir.string());
  ASSERT_FALSE(files.ok());
  EXPECT_NE(files.error().message.find("not the vision tower's image_size 28"), std::string::npos)
      << files.error().message;
  std::filesystem::remove_all(m.dir);
}

}  // namespace
}  // namespace ib
