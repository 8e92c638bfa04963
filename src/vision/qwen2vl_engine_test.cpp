// Qwen2-VL on the CPU: the vision tower against its double-precision reference, and the whole
// model through the engine. A tiny Qwen2VLForConditionalGeneration checkpoint is written with
// transformers' tensor names (transformers 5's model.visual. / model.language_model. layout and
// the published files' visual. / model. one) and loaded as the CLI does (parse_hf_config, the
// qwen2_vl architecture, load_qwen2vl_encoder). The logits are checked against a double-precision
// reference of the whole model: the tower and merger (qwen2vl_test_support) into the visual
// tokens' embeddings, then the Qwen2 with multimodal RoPE (engine/detail/reference_model), the
// positions from the chunk-list form of get_rope_index; all written apart from the engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "engine/detail/engine_test_support.h"
#include "engine/detail/reference_model.h"
#include "model/hf_config.h"
#include "model/safetensors.h"
#include "vision/qwen2vl_encoder.h"
#include "vision/qwen2vl_test_support.h"
#include "vision/vision_test_support.h"
#include "vision/vlm_test_support.h"

namespace ib {
namespace {

using qwen2vl_test::kImagePad;
using qwen2vl_test::kVisionEnd;
using qwen2vl_test::kVisionStart;

using vlm_test::bytes_of;
using vlm_test::max_abs_diff;
using vlm_test::seeded;

double largest_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

struct TinyQwen2Vl {
  std::filesystem::path dir;
  Qwen2VlConfig config;
  qwen2vl_test::HostWeights vision;  // transformers 5 names
  testing::HostWeights text;
};

// Writes config.json, preprocessor_config.json and model.safetensors; published: the Qwen2-VL
// files' names (visual., model.). drop: a tensor left out; extra: one added.
TinyQwen2Vl write_tiny(const std::string& name, bool published, const std::string& drop = "",
                       const std::string& extra = "") {
  TinyQwen2Vl m;
  m.dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::create_directories(m.dir);
  std::ofstream(m.dir / "config.json") << qwen2vl_test::kTinyConfig;
  std::ofstream(m.dir / "preprocessor_config.json") << qwen2vl_test::kTinyPreprocessor;
  m.config = qwen2vl_test::tiny_config();
  m.vision = qwen2vl_test::vision_weights(m.config, 41);
  std::vector<SafetensorsWriteTensor> tensors;
  auto add = [&](std::string n, std::vector<int64_t> shape, const std::vector<float>& v) {
    if (published) {
      for (const auto& [from, to] : std::map<std::string, std::string>{
               {"model.language_model.", "model."}, {"model.visual.", "visual."}}) {
        if (n.starts_with(from)) {
          n = to + n.substr(from.size());
          break;
        }
      }
    }
    if (n != drop) tensors.push_back({n, DType::kF32, std::move(shape), bytes_of(v)});
  };
  for (const auto& [n, v] : m.vision) add(n, qwen2vl_test::vision_shape(n, m.config), v);
  if (!extra.empty()) add(extra, {2}, {1.0f, 2.0f});
  m.text = vlm_test::tiny_text_model({64, 32, 128, 128, 2, /*qkv_bias=*/true}, 78, add);
  IB_ASSERT(write_safetensors((m.dir / "model.safetensors").string(), tensors).ok(),
            "cannot write the tiny Qwen2-VL");
  return m;
}

struct Loaded {
  std::unique_ptr<CpuBackend> backend = std::make_unique<CpuBackend>(2);
  ModelConfig model;
  std::unique_ptr<Engine> engine;
  Qwen2VlPreprocessConfig preprocess;
};

// Loads the checkpoint as the CLI does; chunk: --max-num-batched-tokens; kv_blocks: a pool of
// that many 16-token blocks (0: sized from the memory given).
Result<Loaded> load(const TinyQwen2Vl& m, int chunk, int kv_blocks = 0,
                    int tensor_parallel_size = 1) {
  Loaded out;
  IB_ASSIGN_OR_RETURN(out.engine,
                      vlm_test::load_engine(m.dir.string(), *out.backend, chunk, kv_blocks, 256,
                                            out.model, tensor_parallel_size));
  IB_ASSIGN_OR_RETURN(const Qwen2VlModelFiles files, read_qwen2vl_files(m.dir.string()));
  out.preprocess = files.preprocess;
  IB_ASSIGN_OR_RETURN(auto encoder,
                      load_qwen2vl_encoder(m.dir.string(), files.config, *out.backend));
  IB_TRY(out.engine->set_vision_encoder(std::move(encoder)));
  return out;
}

// Text, then per image <|vision_start|><|image_pad|><|vision_end|> and more text; images of
// different sizes (grids 1 x 6 x 10 and 1 x 4 x 4 after smart_resize).
GenerationRequest make_request(const TinyQwen2Vl& m, const Qwen2VlPreprocessConfig& pre,
                               uint64_t id, int images) {
  GenerationRequest r;
  r.id = id;
  r.max_tokens = 3;
  r.prompt_tokens = {3, 4, 5};
  std::vector<Qwen2VlPixels> pixels;
  const std::array<std::array<int64_t, 2>, 2> sizes = {{{37, 23}, {17, 15}}};
  for (int i = 0; i < images; ++i) {
    r.prompt_tokens.insert(r.prompt_tokens.end(), {kVisionStart, kImagePad, kVisionEnd});
    r.prompt_tokens.insert(r.prompt_tokens.end(), static_cast<size_t>(2 + i), 20 + i);
    const Image image = test::pattern_image(sizes[static_cast<size_t>(i)][0],
                                            sizes[static_cast<size_t>(i)][1], 3 + i, true);
    auto p = preprocess_qwen2vl(image, pre, ImageBackend::kTorchvision);
    IB_ASSERT(p.ok(), "preprocess");
    pixels.push_back(std::move(*p));
  }
  IB_ASSERT(prepare_qwen2vl_request(m.config, std::move(pixels), r).ok(), "prepare");
  return r;
}

struct Tokens {
  std::vector<std::vector<float>> logits;  // per generated token
  std::vector<int32_t> tokens;
  int visual_tokens = 0;
};

std::map<uint64_t, Tokens> run(Engine& engine, int* images_encoded = nullptr) {
  std::map<uint64_t, Tokens> out;
  for (int step = 0; engine.has_unfinished(); ++step) {
    IB_ASSERT(step < 1000, "the engine did not finish");
    auto s = engine.step();
    IB_ASSERT(s.ok(), s.ok() ? "" : s.error().message.c_str());
    if (images_encoded != nullptr) *images_encoded += s->stats.num_images_encoded;
    for (TokenEvent& e : s->events) {
      Tokens& t = out[e.request_id];
      if (e.output_index == 0) t.visual_tokens = e.visual_tokens;
      t.logits.push_back(e.logits);
      t.tokens.push_back(e.token);
    }
  }
  return out;
}

// The reference's logits for the prompt plus the generated tokens fed back: row L - 1 + i is
// generated token i's distribution. mrope: get_rope_index's positions, later tokens continuing
// from their maximum + 1; otherwise sequential positions (the check that M-RoPE matters).
std::vector<std::vector<double>> reference(const TinyQwen2Vl& m, const ModelConfig& model,
                                           const GenerationRequest& r,
                                           const std::vector<int32_t>& generated, bool mrope) {
  std::vector<int32_t> ids = r.prompt_tokens;
  std::vector<std::vector<double>> embeds(ids.size());
  std::vector<float> rows;
  std::vector<std::array<int64_t, 3>> grids;
  for (const ImageInput& image : r.images) {
    rows.insert(rows.end(), image.pixel_values.begin(), image.pixel_values.end());
    grids.push_back({image.grid_thw[0], image.grid_thw[1], image.grid_thw[2]});
  }
  const qwen2vl_test::Matrix visual =
      qwen2vl_test::reference_vision(m.vision, m.config, rows, grids);
  size_t next = 0;
  for (const ImageInput& image : r.images) {
    const auto n =
        static_cast<size_t>(image.grid_thw[0] * image.grid_thw[1] * image.grid_thw[2] / 4);
    for (size_t i = 0; i < n; ++i)
      embeds[static_cast<size_t>(image.start_pos) + i] = visual[next++];
  }
  std::vector<int32_t> pos = qwen2vl_test::reference_rope_index(ids, m.config, grids);
  const size_t len = ids.size();
  const int32_t top = *std::max_element(pos.begin(), pos.end());
  ids.insert(ids.end(), generated.begin(), generated.end());
  std::vector<int32_t> all(3 * ids.size());
  for (size_t k = 0; k < 3; ++k) {
    for (size_t i = 0; i < ids.size(); ++i) {
      all[k * ids.size() + i] = !mrope    ? static_cast<int32_t>(i)
                                : i < len ? pos[k * len + i]
                                          : top + 1 + static_cast<int32_t>(i - len);
    }
  }
  return testing::reference_logits(model, m.text, ids, embeds, all);
}

TEST(Qwen2VlVisionTower, MatchesTheDoubleReferenceOverImagesOfTwoSizes) {
  const Qwen2VlConfig c = qwen2vl_test::tiny_config();
  const qwen2vl_test::HostWeights w = qwen2vl_test::vision_weights(c, 5);
  CpuBackend backend(2);
  // The weights loaded from a checkpoint written with them (transformers 5's names).
  std::vector<SafetensorsWriteTensor> tensors;
  for (const auto& [n, v] : w) {
    tensors.push_back({n, DType::kF32, qwen2vl_test::vision_shape(n, c), bytes_of(v)});
  }
  const auto path = std::filesystem::temp_directory_path() / "ib_qwen2vl_tower.safetensors";
  ASSERT_TRUE(write_safetensors(path.string(), tensors).ok());
  auto ckpt = SafetensorsCheckpoint::open(path.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.error().message;
  auto weights = load_qwen2vl_vision_weights(backend, **ckpt, c);
  ASSERT_TRUE(weights.ok()) << weights.error().message;
  const std::vector<std::array<int64_t, 3>> grids = {{1, 6, 10}, {1, 4, 2}, {2, 2, 2}};
  Rng rng(9);
  std::vector<float> pixels = seeded(rng, (60 + 8 + 8) * c.vision.patch_values(), 0, 2.0f);
  auto buffer = backend.alloc(static_cast<size_t>(19 * 64 * 4), MemoryTag::kActivations);
  ASSERT_TRUE(buffer.ok());
  const Tensor out = buffer->view(DType::kF32, {19, 64});
  ASSERT_TRUE(encode_qwen2vl_images(backend, *weights, c, pixels, grids, out).ok());
  std::vector<float> got(19 * 64);
  backend.copy_to_host(out, got.data());
  const qwen2vl_test::Matrix want = qwen2vl_test::reference_vision(w, c, pixels, grids);
  ASSERT_EQ(want.size(), 19u);
  double worst = 0, largest = 0;
  for (size_t r = 0; r < want.size(); ++r) {
    for (size_t i = 0; i < 64; ++i) {
      worst = std::max(worst, std::abs(got[r * 64 + i] - want[r][i]));
      largest = std::max(largest, std::abs(want[r][i]));
    }
  }
  EXPECT_GT(largest, 0.1);
  EXPECT_LE(worst, 2e-5 * std::max(1.0, largest));
  std::filesystem::remove(path);
}

TEST(Qwen2VlEngine, LogitsMatchTheDoubleReferenceOfTheWholeModel) {
  for (const bool published : {false, true}) {
    SCOPED_TRACE(published ? "published names" : "transformers 5 names");
    const TinyQwen2Vl m = write_tiny(published ? "ib_qwen2vl_pub" : "ib_qwen2vl_t5", published);
    auto l = load(m, 8);  // chunks of 8 tokens cover parts of images
    ASSERT_TRUE(l.ok()) << l.error().message;
    EXPECT_EQ(l->model.family, "qwen2_vl");
    EXPECT_EQ(l->model.mrope_section, (std::vector<int>{2, 3, 3}));
    const GenerationRequest one = make_request(m, l->preprocess, 1, 1);
    const GenerationRequest two = make_request(m, l->preprocess, 2, 2);
    ASSERT_TRUE(l->engine->add_request(one).ok());
    ASSERT_TRUE(l->engine->add_request(two).ok());
    int encoded = 0;
    const auto got = run(*l->engine, &encoded);
    EXPECT_EQ(encoded, 3);
    for (const auto& [id, r] : std::map<uint64_t, const GenerationRequest*>{{1, &one}, {2, &two}}) {
      const Tokens& t = got.at(id);
      ASSERT_EQ(t.tokens.size(), 3u);
      EXPECT_EQ(t.visual_tokens, id == 1 ? 15 : 15 + 4);
      const auto want = reference(m, l->model, *r, t.tokens, true);
      const size_t len = r->prompt_tokens.size();
      for (size_t i = 0; i < 3; ++i) {  // prefill, then two decode steps past the prompt
        const std::vector<double>& row = want[len - 1 + i];
        EXPECT_GT(largest_abs(row), 0.5);
        EXPECT_LE(max_abs_diff(t.logits[i], row), 1e-4 * std::max(1.0, largest_abs(row)))
            << "request " << id << " token " << i;
      }
      // The check can fail: with sequential positions the reference is far from the engine.
      const auto flat = reference(m, l->model, *r, t.tokens, false);
      EXPECT_GT(max_abs_diff(t.logits[0], flat[len - 1]), 1e-3) << "request " << id;
    }
    std::filesystem::remove_all(m.dir);
  }
}

// A pool too small for both requests: one is preempted and recomputes its prompt and generated
// tokens (those at index + max + 1 - length); the tokens are the unpreempted run's.
TEST(Qwen2VlEngine, APreemptedRequestRecomputesItsPositions) {
  const TinyQwen2Vl m = write_tiny("ib_qwen2vl_preempt", false);
  std::vector<std::map<uint64_t, Tokens>> runs;
  for (const int blocks : {0, 5}) {
    auto l = load(m, 8, blocks);
    ASSERT_TRUE(l.ok()) << l.error().message;
    for (const int id : {1, 2}) {
      GenerationRequest r = make_request(m, l->preprocess, static_cast<uint64_t>(id), id);
      r.max_tokens = 20;  // 42 and 51 tokens: 7 blocks at the end, 5 in the pool
      ASSERT_TRUE(l->engine->add_request(std::move(r)).ok());
    }
    runs.push_back(run(*l->engine));
    EXPECT_EQ(l->engine->stats().preemptions > 0, blocks > 0);
  }
  for (const uint64_t id : {1, 2}) {
    ASSERT_EQ(runs[1].at(id).tokens.size(), 20u);
    EXPECT_EQ(runs[1].at(id).tokens, runs[0].at(id).tokens) << "request " << id;
  }
  std::filesystem::remove_all(m.dir);
}

// Over tensor-parallel ranks (CPU threads): the image embeddings reach every rank through rank 0
// (the others zero their rows before the embedding's sum), and the logits and tokens are one
// rank's, within fp32's reordering of the ranks' partial sums.
TEST(Qwen2VlEngine, TensorParallelRanksGiveOneRanksLogits) {
  const TinyQwen2Vl m = write_tiny("ib_qwen2vl_tp", false);
  std::vector<std::map<uint64_t, Tokens>> runs;
  for (const int ranks : {1, 2}) {
    auto l = load(m, 8, 0, ranks);
    ASSERT_TRUE(l.ok()) << l.error().message;
    for (const int id : {1, 2}) {
      ASSERT_TRUE(
          l->engine->add_request(make_request(m, l->preprocess, static_cast<uint64_t>(id), id))
              .ok());
    }
    runs.push_back(run(*l->engine));
  }
  for (const uint64_t id : {1, 2}) {
    const Tokens &one = runs[0].at(id), &two = runs[1].at(id);
    EXPECT_EQ(two.tokens, one.tokens) << "request " << id;
    ASSERT_EQ(two.logits.size(), one.logits.size());
    for (size_t i = 0; i < one.logits.size(); ++i)
      EXPECT_LT(testing::rel_l2(two.logits[i], one.logits[i]), 1e-5)
          << "request " << id << " token " << i;
  }
  std::filesystem::remove_all(m.dir);
}

TEST(Qwen2VlEngine, TextOnlyRequestsTakeSequentialPositions) {
  const TinyQwen2Vl m = write_tiny("ib_qwen2vl_text", false);
  auto l = load(m, 64);
  ASSERT_TRUE(l.ok()) << l.error().message;
  GenerationRequest r;
  r.id = 7;
  r.max_tokens = 2;
  r.prompt_tokens = {3, 9, 27, 81, 15, 45};
  ASSERT_TRUE(l->engine->add_request(r).ok());
  const Tokens t = run(*l->engine).at(7);
  const auto want = reference(m, l->model, r, t.tokens, false);
  for (size_t i = 0; i < 2; ++i) {
    const std::vector<double>& row = want[r.prompt_tokens.size() - 1 + i];
    EXPECT_LE(max_abs_diff(t.logits[i], row), 1e-4 * std::max(1.0, largest_abs(row)));
  }
  std::filesystem::remove_all(m.dir);
}

// The language model's config in the published files' layout (text fields at the top level,
// rope_scaling "mrope") and in transformers 5's (text_config with rope_parameters).
TEST(Qwen2VlEngine, ReadsBothConfigLayouts) {
  auto flat = parse_hf_config(R"({
    "architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
    "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
    "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vision_config": {"depth": 32, "embed_dim": 1280, "hidden_size": 1536, "num_heads": 16}})",
                              "qwen2-vl-2b");
  ASSERT_TRUE(flat.ok()) << flat.error().message;
  EXPECT_TRUE(is_qwen2vl(*flat));
  EXPECT_EQ(flat->family, "qwen2_vl");
  EXPECT_EQ(flat->hidden_size, 1536);
  EXPECT_EQ(flat->num_layers, 28);
  EXPECT_EQ(flat->head_dim, 128);
  EXPECT_TRUE(flat->attention_bias);
  EXPECT_TRUE(flat->tie_word_embeddings);
  EXPECT_EQ(flat->rope_theta, 1e6);
  EXPECT_EQ(flat->rope_scaling.type, "none");
  EXPECT_EQ(flat->mrope_section, (std::vector<int>{16, 24, 24}));
  EXPECT_TRUE(flat->check_supported().ok());
  auto v5 = parse_hf_config(R"({
    "architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
    "text_config": {"model_type": "qwen2_vl_text", "hidden_size": 64, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 128,
                    "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3],
                                        "rope_theta": 5000.0}},
    "vision_config": {"hidden_size": 64}})",
                            "tiny-v5");
  ASSERT_TRUE(v5.ok()) << v5.error().message;
  EXPECT_EQ(v5->intermediate_size, 29568);  // Qwen2VLTextConfig's default
  EXPECT_EQ(v5->rope_theta, 5000.0);
  EXPECT_EQ(v5->rms_norm_eps, 1e-5);
  EXPECT_EQ(v5->mrope_section, (std::vector<int>{2, 3, 3}));
}

TEST(Qwen2VlEngine, BadInputGetsClearErrors) {
  {
    const TinyQwen2Vl m =
        write_tiny("ib_qwen2vl_missing", false, "model.visual.blocks.1.attn.qkv.bias");
    auto l = load(m, 64);
    ASSERT_FALSE(l.ok());
    EXPECT_EQ(l.error().kind, ErrorKind::kUser);
    EXPECT_NE(l.error().message.find("has no model.visual.blocks.1.attn.qkv.bias [96]"),
              std::string::npos)
        << l.error().message;
    std::filesystem::remove_all(m.dir);
  }
  {
    const TinyQwen2Vl m =
        write_tiny("ib_qwen2vl_no_tower", false, "model.visual.patch_embed.proj.weight");
    auto l = load(m, 64);
    ASSERT_FALSE(l.ok());
    EXPECT_NE(l.error().message.find("neither model.visual.patch_embed.proj.weight nor "
                                     "visual.patch_embed.proj.weight: no Qwen2-VL vision tower"),
              std::string::npos)
        << l.error().message;
    std::filesystem::remove_all(m.dir);
  }
  {
    const TinyQwen2Vl m = write_tiny("ib_qwen2vl_extra", true, "", "visual.blocks.2.norm1.bias");
    auto l = load(m, 64);
    ASSERT_FALSE(l.ok());
    EXPECT_NE(l.error().message.find("holds visual.blocks.2.norm1.bias"), std::string::npos)
        << l.error().message;
    std::filesystem::remove_all(m.dir);
  }
  {
    const TinyQwen2Vl m = write_tiny("ib_qwen2vl_lm_missing", false,
                                     "model.language_model.layers.1.self_attn.k_proj.bias");
    auto l = load(m, 64);
    ASSERT_FALSE(l.ok());
    EXPECT_NE(l.error().message.find("k_proj.bias"), std::string::npos) << l.error().message;
    std::filesystem::remove_all(m.dir);
  }
  // config.json without mrope_section.
  std::string config = qwen2vl_test::kTinyConfig;
  config.replace(config.find(", \"mrope_section\": [2, 3, 3]"),
                 std::string(", \"mrope_section\": [2, 3, 3]").size(), "");
  auto no_sections = parse_hf_config(config, "tiny");
  ASSERT_FALSE(no_sections.ok());
  EXPECT_NE(no_sections.error().message.find("no \"mrope_section\""), std::string::npos)
      << no_sections.error().message;
  std::string wrong = qwen2vl_test::kTinyConfig;
  wrong.replace(wrong.find("[2, 3, 3]"), 9, "[2, 3, 4]");
  auto bad_sum = parse_hf_config(wrong, "tiny");
  ASSERT_FALSE(bad_sum.ok());
  EXPECT_NE(bad_sum.error().message.find("head_dim / 2 = 8"), std::string::npos)
      << bad_sum.error().message;

  // Requests the engine refuses.
  const TinyQwen2Vl m = write_tiny("ib_qwen2vl_requests", false);
  auto l = load(m, 64);
  ASSERT_TRUE(l.ok()) << l.error().message;
  auto refused = [&](GenerationRequest r, const std::string& words) {
    const Status s = l->engine->add_request(std::move(r));
    ASSERT_FALSE(s.ok()) << words;
    EXPECT_EQ(s.error().kind, ErrorKind::kUser);
    EXPECT_NE(s.error().message.find(words), std::string::npos) << s.error().message;
  };
  const GenerationRequest good = make_request(m, l->preprocess, 1, 1);
  GenerationRequest r = good;
  r.images[0].grid_thw = {1, 5, 10};
  refused(r, "multiples of 2");
  r = good;
  r.images[0].pixel_values.pop_back();
  refused(r, "pixel values");
  r = good;
  r.mrope_positions.pop_back();
  refused(r, "M-RoPE positions for a prompt");
  r = good;
  r.mrope_positions.clear();
  refused(r, "need its M-RoPE positions");
  std::filesystem::remove_all(m.dir);
}

}  // namespace
}  // namespace ib
