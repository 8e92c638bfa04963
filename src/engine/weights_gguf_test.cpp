// GGUF weights on the CPU: small llama, qwen2 and phi3 files in a mix of ggml types
// (gguf_test_support.h). The loaded weights are read_gguf_tensor_f32's values at their engine
// places (llama's q/k rows back in HF order, undone here independently of the loader); a
// generation's logits equal those of the same values loaded from a safetensors checkpoint, dense
// and quantized at load; --quantization gguf needs a GGUF file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "engine/detail/checkpoint_test_support.h"
#include "engine/detail/engine_test_support.h"
#include "model/detail/gguf_test_support.h"
#include "model/presets.h"

namespace ib {
namespace {

using testing::HostWeights;
using testing::TempDir;
using testing::test_gguf_config;

std::vector<float> rows(const std::vector<float>& v, int64_t first, int64_t count, int64_t cols) {
  return {v.begin() + first * cols, v.begin() + (first + count) * cols};
}

// llama.cpp's converter stores each head's HF rows (half i, index j) at row 2 j + i of the head;
// this puts them back.
std::vector<float> hf_order(const std::vector<float>& gguf, int64_t cols, int64_t head_dim) {
  std::vector<float> hf(gguf.size());
  const int64_t heads = static_cast<int64_t>(gguf.size()) / cols / head_dim;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < head_dim / 2; ++j) {
        const int64_t from = h * head_dim + 2 * j + i, to = h * head_dim + i * head_dim / 2 + j;
        std::copy_n(gguf.begin() + from * cols, cols, hf.begin() + to * cols);
      }
    }
  }
  return hf;
}

// The file's values, dequantized, in HostWeights' HF layout.
HostWeights expected_weights(const ModelConfig& c, const std::string& path) {
  auto file = GgufModelFile::open(path);
  IB_ASSERT(file.ok(), "the test file opens");
  auto get = [&](const std::string& name) {
    auto v = read_gguf_tensor_f32(**file, name);
    IB_ASSERT(v.ok(), "the test file holds the tensor");
    return std::move(v).value();
  };
  const int64_t d = c.hidden_size, q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim, f = c.intermediate_size;
  const bool llama = c.family == "llama";
  HostWeights w;
  w.embed = get("token_embd.weight");
  w.final_norm = get("output_norm.weight");
  w.lm_head = c.tie_word_embeddings ? w.embed : get("output.weight");
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    testing::HostLayer& h = w.layers.emplace_back();
    h.attn_norm = get(p + "attn_norm.weight");
    h.ffn_norm = get(p + "ffn_norm.weight");
    h.o = get(p + "attn_output.weight");
    h.down = get(p + "ffn_down.weight");
    if (c.family == "phi3") {
      const auto qkv = get(p + "attn_qkv.weight"), gate_up = get(p + "ffn_up.weight");
      h.q = rows(qkv, 0, q, d);
      h.k = rows(qkv, q, kv, d);
      h.v = rows(qkv, q + kv, kv, d);
      h.gate = rows(gate_up, 0, f, d);
      h.up = rows(gate_up, f, f, d);
      continue;
    }
    h.q = llama ? hf_order(get(p + "attn_q.weight"), d, c.head_dim) : get(p + "attn_q.weight");
    h.k = llama ? hf_order(get(p + "attn_k.weight"), d, c.head_dim) : get(p + "attn_k.weight");
    h.v = get(p + "attn_v.weight");
    h.gate = get(p + "ffn_gate.weight");
    h.up = get(p + "ffn_up.weight");
    if (c.attention_bias) {
      h.q_bias = get(p + "attn_q.bias");
      h.k_bias = get(p + "attn_k.bias");
      h.v_bias = get(p + "attn_v.bias");
    }
  }
  return w;
}

void expect_same(const HostWeights& got, const HostWeights& want) {
  EXPECT_EQ(got.embed, want.embed);
  EXPECT_EQ(got.final_norm, want.final_norm);
  EXPECT_EQ(got.lm_head, want.lm_head);
  ASSERT_EQ(got.layers.size(), want.layers.size());
  for (size_t l = 0; l < got.layers.size(); ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const testing::HostLayer &g = got.layers[l], &e = want.layers[l];
    for (const auto& [name, a, b] : {std::tuple{"attn_norm", &g.attn_norm, &e.attn_norm},
                                     {"q", &g.q, &e.q},
                                     {"k", &g.k, &e.k},
                                     {"v", &g.v, &e.v},
                                     {"q_bias", &g.q_bias, &e.q_bias},
                                     {"k_bias", &g.k_bias, &e.k_bias},
                                     {"v_bias", &g.v_bias, &e.v_bias},
                                     {"o", &g.o, &e.o},
                                     {"ffn_norm", &g.ffn_norm, &e.ffn_norm},
                                     {"gate", &g.gate, &e.gate},
                                     {"up", &g.up, &e.up},
                                     {"down", &g.down, &e.down}}) {
      EXPECT_EQ(*a, *b) << name;
    }
  }
}

struct GgufModel {
  TempDir dir;
  std::string path;
  ModelConfig config;  // as --model FILE.gguf resolves it
};

std::unique_ptr<GgufModel> write_model(const ModelConfig& c) {
  auto m = std::make_unique<GgufModel>();
  m->path = (m->dir.path() / "model.gguf").string();
  const Status written = testing::write_test_gguf(m->path, c, 7);
  IB_ASSERT(written.ok(), "write_test_gguf");
  auto resolved = resolve_model(m->path);
  IB_ASSERT(resolved.ok(), "the test file resolves");
  m->config = std::move(resolved).value();
  return m;
}

TEST(GgufWeights, AreTheFilesValuesAtTheirEnginePlaces) {
  for (const ModelConfig& c :
       {test_gguf_config("llama"), test_gguf_config("qwen2"), test_gguf_config("phi3")}) {
    SCOPED_TRACE(c.family);
    const auto m = write_model(c);
    EXPECT_EQ(m->config.tie_word_embeddings, c.tie_word_embeddings);
    EXPECT_EQ(m->config.attention_bias, c.attention_bias);
    CpuBackend backend(2);
    auto w = load_weights(m->config, {LoadFormat::kAuto, m->path, 0}, backend);
    ASSERT_TRUE(w.ok()) << w.error().message;
    EXPECT_NE(w->description.find("gguf: " + m->path + " ("), std::string::npos) << w->description;
    EXPECT_NE(w->description.find("dequantized to fp32 at load"), std::string::npos);
    const HostWeights want = expected_weights(c, m->path);
    expect_same(testing::copy_weights_to_host(m->config, *w, backend), want);
    if (c.tie_word_embeddings) {
      EXPECT_EQ(w->lm_head.data.data, w->embed.data);
    }
  }
}

TEST(GgufWeights, TheTestFilesHoldEveryTypeAndPermutedRows) {
  const auto m = write_model(test_gguf_config("llama"));
  auto file = GgufModelFile::open(m->path);
  ASSERT_TRUE(file.ok());
  std::set<std::string> types;
  for (const GgufTensorInfo& t : (*file)->file().tensors) {
    types.insert(std::string(ggml_type_info(t.type).name));
  }
  EXPECT_EQ(types,
            (std::set<std::string>{"BF16", "F16", "F32", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q8_0"}));
  // The un-permutation is not the identity: the file's q rows are not in HF order.
  const auto q = read_gguf_tensor_f32(**file, "blk.0.attn_q.weight");
  ASSERT_TRUE(q.ok());
  EXPECT_NE(*q, hf_order(*q, 256, 64));
}

// Every sampled row's logits of two greedy requests on weights w, their matmul weights in
// quantization's format.
std::vector<std::vector<float>> logits_of(const ModelConfig& c, ModelWeights w,
                                          const std::string& quantization, Backend& backend) {
  auto engine = testing::logits_engine(c, std::move(w), quantization, backend);
  EXPECT_TRUE(engine->add_request(testing::greedy_request(1, {0, 17, 99, 3, 42, 8}, 4)).ok());
  EXPECT_TRUE(engine->add_request(testing::greedy_request(2, {61, 2}, 3)).ok());
  std::vector<std::vector<float>> out;
  for (auto& [id, done] : testing::run_to_completion(*engine)) {
    out.insert(out.end(), done.logits.begin(), done.logits.end());
  }
  return out;
}

TEST(GgufWeights, SameLogitsAsTheSameValuesFromSafetensors) {
  for (const ModelConfig& c :
       {test_gguf_config("llama"), test_gguf_config("qwen2"), test_gguf_config("phi3")}) {
    for (const char* quantization : {"none", "int8"}) {
      SCOPED_TRACE(c.family + " " + quantization);
      const auto m = write_model(c);
      const auto layout = c.family == "phi3" ? testing::CheckpointLayout::kPhi3Fused
                                             : testing::CheckpointLayout::kSplit;
      ASSERT_TRUE(write_safetensors((m->dir.path() / "model.safetensors").string(),
                                    testing::hf_tensors(m->config, expected_weights(c, m->path),
                                                        DType::kF32, layout))
                      .ok());
      CpuBackend backend(2);
      WeightOptions options{LoadFormat::kGguf, m->path, 0};
      options.quantization = quantization_weight_format(quantization).value();
      auto from_gguf = load_weights(m->config, options, backend);
      ASSERT_TRUE(from_gguf.ok()) << from_gguf.error().message;
      options.format = LoadFormat::kSafetensors;
      options.path = m->dir.path().string();
      auto from_safetensors = load_weights(m->config, options, backend);
      ASSERT_TRUE(from_safetensors.ok()) << from_safetensors.error().message;
      const auto a = logits_of(m->config, std::move(from_gguf).value(), quantization, backend);
      const auto b =
          logits_of(m->config, std::move(from_safetensors).value(), quantization, backend);
      ASSERT_EQ(a.size(), 7u);
      EXPECT_EQ(a, b);  // bit for bit: the same fp32 values, the same engine
    }
  }
}

TEST(GgufWeights, GenerationFollowsTheDoublePrecisionReference) {
  const auto m = write_model(test_gguf_config("llama"));
  CpuBackend backend(2);
  auto w = load_weights(m->config, {LoadFormat::kGguf, m->path, 0}, backend);
  ASSERT_TRUE(w.ok()) << w.error().message;
  const std::vector<int32_t> prompt = {0, 17, 99, 3, 42, 8};
  const auto want = testing::reference_logits(
      m->config, expected_weights(test_gguf_config("llama"), m->path), prompt);
  auto engine = testing::logits_engine(m->config, std::move(w).value(), "none", backend);
  ASSERT_TRUE(engine->add_request(testing::greedy_request(1, prompt, 1)).ok());
  const auto done = testing::run_to_completion(*engine);
  const std::vector<float>& got = done.at(1).logits.at(0);  // after the last prompt token
  ASSERT_EQ(got.size(), want.back().size());
  double scale = 0;
  for (const double x : want.back()) scale = std::max(scale, std::abs(x));
  ASSERT_GT(scale, 0.1);  // logits of a size that the tolerance below means something against
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want.back()[i], 1e-4 * scale) << i;
}

// A test file whose matmul tensors are all in block types (attn_output re-stored as Q8_0, the
// others as test_gguf_type has them), so that --quantization gguf keeps them in their blocks.
std::unique_ptr<GgufModel> write_block_model(const ModelConfig& c) {
  auto m = write_model(c);
  const Status restored = testing::copy_gguf(m->path, m->path, [](auto&, auto& tensors) -> Status {
    for (GgufWriteTensor& t : tensors) {
      if (!t.name.ends_with("attn_output.weight")) continue;
      GgufTensorInfo info{t.name, t.type, t.dims};
      std::vector<float> values(static_cast<size_t>(info.numel()));
      IB_TRY(dequantize_ggml(t.type, t.bytes, values));
      t.type = GgmlType::kQ8_0;
      IB_ASSIGN_OR_RETURN(t.bytes, quantize_ggml(t.type, values));
    }
    return Ok{};
  });
  IB_ASSERT(restored.ok(), "re-storing attn_output");
  return m;
}

// A kGguf weight's rows read back and dequantized, row-major (N, K).
std::vector<float> gguf_values(const WeightRef& w, Backend& backend) {
  std::vector<uint8_t> bytes(static_cast<size_t>(w.data.numel()));
  backend.copy_to_host(w.data, bytes.data());
  const int64_t k = w.cols(), stride = w.data.dim(1);
  std::vector<float> out(static_cast<size_t>(w.rows() * k));
  for (int64_t n = 0; n < w.rows(); ++n) {
    const GgmlType type = w.gguf.type[w.gguf.segment_of(n)];
    const auto* row = reinterpret_cast<const char*>(bytes.data() + n * stride);
    const Status st =
        dequantize_ggml(type, std::string_view(row, static_cast<size_t>(gguf_row_bytes(type, k))),
                        std::span<float>(out.data() + n * k, static_cast<size_t>(k)));
    EXPECT_TRUE(st.ok()) << st.error().message;
  }
  return out;
}

std::vector<float> concat(std::initializer_list<const std::vector<float>*> parts) {
  std::vector<float> out;
  for (const auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

TEST(GgufWeights, QuantizationGgufKeepsTheMatmulWeightsInTheirBlocks) {
  for (const ModelConfig& c :
       {test_gguf_config("llama"), test_gguf_config("qwen2"), test_gguf_config("phi3")}) {
    SCOPED_TRACE(c.family);
    const auto m = write_block_model(c);
    CpuBackend backend(2);
    WeightOptions options{LoadFormat::kAuto, m->path, 0};
    options.gguf_as_stored = true;
    auto w = load_weights(m->config, options, backend);
    ASSERT_TRUE(w.ok()) << w.error().message;
    EXPECT_NE(w->description.find("matmul tensors in their ggml blocks"), std::string::npos)
        << w->description;
    const HostWeights want = expected_weights(c, m->path);
    for (size_t l = 0; l < w->layers.size(); ++l) {
      SCOPED_TRACE("layer " + std::to_string(l));
      const LayerWeights& got = w->layers[l];
      const testing::HostLayer& e = want.layers[l];
      for (const auto& [name, ref, values] :
           {std::tuple{"qkv", &got.wqkv, concat({&e.q, &e.k, &e.v})},
            {"o", &got.wo, e.o},
            {"gate_up", &got.w_gate_up, concat({&e.gate, &e.up})},
            {"down", &got.w_down, e.down}}) {
        ASSERT_EQ(ref->format, WeightFormat::kGguf) << name;
        EXPECT_TRUE(ref->quantized_layout_ok()) << name;
        EXPECT_EQ(gguf_values(*ref, backend), values) << name;  // the file's values, bit for bit
      }
      if (c.family == "llama") {  // q and k in Q8_0, v in Q4_0: two row segments
        ASSERT_EQ(got.wqkv.gguf.count, 2);
        EXPECT_EQ(got.wqkv.gguf.type[1], GgmlType::kQ4_0);
        EXPECT_EQ(got.wqkv.gguf.begin[1], int64_t{c.num_heads + c.num_kv_heads} * c.head_dim);
      }
    }
  }
}

TEST(GgufWeights, QuantizationGgufQuantizesActivationsPer32) {
  // The same values dequantized (none) and in their blocks (gguf, x through its int8 round trip):
  // close, not equal.
  const auto m = write_block_model(test_gguf_config("llama"));
  CpuBackend backend(2);
  WeightOptions options{LoadFormat::kGguf, m->path, 0};
  auto dense = load_weights(m->config, options, backend);
  ASSERT_TRUE(dense.ok()) << dense.error().message;
  EXPECT_EQ(dense->layers[0].wqkv.format, WeightFormat::kDense);
  options.gguf_as_stored = true;
  auto blocks = load_weights(m->config, options, backend);
  ASSERT_TRUE(blocks.ok()) << blocks.error().message;
  const auto a = logits_of(m->config, std::move(dense).value(), "none", backend);
  const auto b = logits_of(m->config, std::move(blocks).value(), "gguf", backend);
  ASSERT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t j = 0; j < a[i].size(); ++j) {
      num += (a[i][j] - b[i][j]) * (a[i][j] - b[i][j]);
      den += a[i][j] * a[i][j];
    }
  }
  const double rel = std::sqrt(num / den);
  EXPECT_GT(rel, 0.0);
  EXPECT_LT(rel, 3e-2);
}

TEST(GgufWeights, DummyWeightsAreQuantizedAtLoadInTheQ4KMMix) {
  // The llama test shapes (hidden 256, FFN 512: whole Q4_K blocks), 2 layers: layer 1 is one of
  // the Q4_K_M mix's "more bits" layers (the last eighth), so its v rows and down are Q6_K.
  const ModelConfig c = test_gguf_config("llama");
  CpuBackend backend(2);
  const WeightOptions dense_options{LoadFormat::kDummy, "", 3};
  auto dense = load_weights(c, dense_options, backend);
  ASSERT_TRUE(dense.ok()) << dense.error().message;
  WeightOptions options = dense_options;
  options.gguf_as_stored = true;
  auto w = load_weights(c, options, backend);
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_NE(w->description.find("Q4_K_M"), std::string::npos) << w->description;
  const int64_t qk = int64_t{c.num_heads + c.num_kv_heads} * c.head_dim;
  for (size_t l = 0; l < w->layers.size(); ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const LayerWeights &got = w->layers[l], &from = dense->layers[l];
    const bool more_bits = l == 1;
    ASSERT_EQ(got.wqkv.gguf.count, more_bits ? 2 : 1);
    if (more_bits) {
      EXPECT_EQ(got.wqkv.gguf.begin[1], qk);
      EXPECT_EQ(got.wqkv.gguf.type[1], GgmlType::kQ6_K);
    }
    EXPECT_EQ(got.w_down.gguf.type[0], more_bits ? GgmlType::kQ6_K : GgmlType::kQ4_K);
    for (const auto& [ref, values] : {std::pair{&got.wqkv, &from.wqkv},
                                      {&got.wo, &from.wo},
                                      {&got.w_gate_up, &from.w_gate_up},
                                      {&got.w_down, &from.w_down}}) {
      ASSERT_EQ(ref->format, WeightFormat::kGguf);
      // Each row: the dense dummy row through its type's quantizer and back.
      std::vector<float> want(static_cast<size_t>(values->data.numel()));
      backend.copy_to_host(values->data, want.data());
      const int64_t k = ref->cols();
      for (int64_t r = 0; r < ref->rows(); ++r) {
        const GgmlType type = ref->gguf.type[ref->gguf.segment_of(r)];
        const std::span<float> row(want.data() + r * k, static_cast<size_t>(k));
        auto q = quantize_ggml(type, row);
        ASSERT_TRUE(q.ok());
        ASSERT_TRUE(dequantize_ggml(type, *q, row).ok());
      }
      EXPECT_EQ(gguf_values(*ref, backend), want);
    }
  }
}

TEST(GgufWeights, DummyQuantizationGgufRefusesRowsQ4KCannotTile) {
  CpuBackend backend(2);
  WeightOptions options{LoadFormat::kDummy, "", 0};
  options.gguf_as_stored = true;
  auto w = load_weights(test_gguf_config("qwen2"), options, backend);  // hidden 64
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("not whole 256-element blocks of Q4_K"), std::string::npos)
      << w.error().message;
  EXPECT_NE(w.error().message.find("as --model"), std::string::npos);
}

TEST(GgufWeights, AMissingTensorIsNamed) {
  const auto m = write_model(test_gguf_config("llama"));
  const std::string cut = (m->dir.path() / "cut.gguf").string();
  ASSERT_TRUE(testing::copy_gguf(m->path, cut, [](auto&, auto& tensors) -> Status {
                std::erase_if(tensors,
                              [](const auto& t) { return t.name == "blk.1.ffn_down.weight"; });
                return Ok{};
              }).ok());
  CpuBackend backend(2);
  auto w = load_weights(m->config, {LoadFormat::kAuto, cut, 0}, backend);
  ASSERT_FALSE(w.ok());
  const std::string e = w.error().message;
  EXPECT_NE(e.find("GGUF: " + cut + " does not hold a LlamaForCausalLM checkpoint"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("'model.layers.1.mlp.down_proj.weight' is missing"), std::string::npos) << e;
  EXPECT_NE(e.find("The GGUF metadata"), std::string::npos) << e;
}

TEST(GgufWeights, GgufQuantizationNeedsAGgufFileOrDummyWeights) {
  const auto m = write_model(test_gguf_config("qwen2"));
  CpuBackend backend(2);
  const Status refused = check_gguf_quantization("gguf", "tiny-15m", false, false);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("--load-format dummy"), std::string::npos);
  EXPECT_TRUE(check_gguf_quantization("gguf", "tiny-15m", false, true).ok());  // dummy weights
  EXPECT_TRUE(check_gguf_quantization("gguf", m->path, true, false).ok());
  WeightOptions options{LoadFormat::kAuto, m->path, 0};
  options.gguf_as_stored = true;
  auto stored = load_weights(m->config, options, backend);
  ASSERT_TRUE(stored.ok()) << stored.error().message;
  EXPECT_EQ(stored->layers[0].wqkv.format, WeightFormat::kDense);
  options.format = LoadFormat::kGguf;
  options.path = m->dir.path().string();
  auto not_gguf = load_weights(m->config, options, backend);
  ASSERT_FALSE(not_gguf.ok());
  EXPECT_NE(not_gguf.error().message.find("is not a GGUF file"), std::string::npos);
}

}  // namespace
}  // namespace ib
