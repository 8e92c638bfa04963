// Dummy GGUF files: a config written as metadata and read back is the same config, every tensor
// is one the name table maps, and what GGUF cannot hold is refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "model/gguf.h"
#include "model/presets.h"

namespace ib {
namespace {

namespace fs = std::filesystem;

// A small config of each family, with sizes that are whole K-quant blocks.
ModelConfig small(const std::string& family) {
  ModelConfig c;
  c.name = "small-" + family;
  c.family = family;
  c.vocab_size = 64;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = family == "phi3" ? 4 : 2;
  c.head_dim = 64;
  c.max_position_embeddings = 512;
  c.rope_theta = 500000.0;
  c.rms_norm_eps = 1e-6;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  c.tie_word_embeddings = family == "qwen2";
  c.attention_bias = family == "qwen2";
  c.sliding_window = family == "phi3" ? 256 : 0;
  return c;
}

class DummyGguf : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ib_gguf_dummy_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(DummyGguf, ConfigsRoundTripAndEveryTensorMaps) {
  for (const std::string family : {"llama", "qwen2", "phi3"}) {
    SCOPED_TRACE(family);
    const ModelConfig c = small(family);
    ASSERT_TRUE(write_dummy_gguf(path(family + ".gguf"), c, GgmlType::kQ4_K, 7).ok());
    const auto mapped = GgufModelFile::open(path(family + ".gguf"));
    ASSERT_TRUE(mapped.ok()) << mapped.error().message;
    const GgufFile& file = (*mapped)->file();
    const auto back = gguf_model_config(file, c.name);
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->family, family);
    EXPECT_EQ(back->vocab_size, c.vocab_size);
    EXPECT_EQ(back->hidden_size, c.hidden_size);
    EXPECT_EQ(back->intermediate_size, c.intermediate_size);
    EXPECT_EQ(back->num_layers, c.num_layers);
    EXPECT_EQ(back->num_heads, c.num_heads);
    EXPECT_EQ(back->num_kv_heads, c.num_kv_heads);
    EXPECT_EQ(back->head_dim, c.head_dim);
    EXPECT_EQ(back->max_position_embeddings, c.max_position_embeddings);
    EXPECT_EQ(back->rope_theta, c.rope_theta);
    EXPECT_FLOAT_EQ(static_cast<float>(back->rms_norm_eps), static_cast<float>(c.rms_norm_eps));
    EXPECT_EQ(back->partial_rotary_factor, 1.0);
    EXPECT_EQ(back->sliding_window, c.sliding_window);
    EXPECT_EQ(back->tie_word_embeddings, c.tie_word_embeddings);
    EXPECT_EQ(back->attention_bias, c.attention_bias);
    EXPECT_EQ(back->bos_token_id, 1);
    EXPECT_EQ(back->eos_token_ids, std::vector<int>{2});
    for (const GgufTensorInfo& t : file.tensors) {
      const auto m = map_gguf_tensor(t.name, family);
      EXPECT_TRUE(m.ok()) << t.name;
      EXPECT_EQ(t.type, t.dims.size() == 2 ? GgmlType::kQ4_K : GgmlType::kF32) << t.name;
    }
    const GgufTensorInfo* up = file.find_tensor("blk.1.ffn_up.weight");
    ASSERT_NE(up, nullptr);
    EXPECT_EQ(up->dims, (std::vector<int64_t>{256, family == "phi3" ? 1024 : 512}));
    const auto norm = read_gguf_tensor_f32(**mapped, "output_norm.weight");
    ASSERT_TRUE(norm.ok());
    EXPECT_EQ(*norm, std::vector<float>(256, 1.0f));
  }
}

TEST_F(DummyGguf, WeightsAreSeeded) {
  const ModelConfig c = small("llama");
  ASSERT_TRUE(write_dummy_gguf(path("a.gguf"), c, GgmlType::kQ8_0, 1).ok());
  ASSERT_TRUE(write_dummy_gguf(path("b.gguf"), c, GgmlType::kQ8_0, 1).ok());
  ASSERT_TRUE(write_dummy_gguf(path("c.gguf"), c, GgmlType::kQ8_0, 2).ok());
  const auto a = GgufModelFile::open(path("a.gguf"));
  const auto b = GgufModelFile::open(path("b.gguf"));
  const auto other = GgufModelFile::open(path("c.gguf"));
  const auto wa = read_gguf_tensor_f32(**a, "blk.0.attn_q.weight").value();
  EXPECT_EQ(wa, read_gguf_tensor_f32(**b, "blk.0.attn_q.weight").value());
  EXPECT_NE(wa, read_gguf_tensor_f32(**other, "blk.0.attn_q.weight").value());
  const auto wk = read_gguf_tensor_f32(**a, "blk.0.attn_k.weight").value();
  ASSERT_LT(wk.size(), wa.size());
  EXPECT_FALSE(std::equal(wk.begin(), wk.end(), wa.begin()));  // each tensor its own stream
  // Uniform in [-a, a), a = sqrt(3 / fan_in) (fan_in: ne[0], the hidden size), up to Q8_0's step.
  const float bound = std::sqrt(3.0f / static_cast<float>(c.hidden_size));
  float most = 0;
  for (const float v : wa) most = std::max(most, std::abs(v));
  EXPECT_LE(most, bound * 1.01f);
  EXPECT_GE(most, bound * 0.9f);
}

TEST_F(DummyGguf, RefusesWhatGgufCannotHoldNamingIt) {
  const auto tiny = find_preset("tiny-15m").value();  // hidden 288: not whole 256-element blocks
  Status s = write_dummy_gguf(path("t.gguf"), tiny, GgmlType::kQ4_K, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("token_embd.weight as Q4_K"), std::string::npos)
      << s.error().message;
  EXPECT_TRUE(write_dummy_gguf(path("t.gguf"), tiny, GgmlType::kQ8_0, 0).ok());  // 288 = 9 * 32
  const auto l32 = find_preset("llama-3.2-1b").value();
  const auto m = gguf_metadata_of(l32);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("llama3 RoPE scaling"), std::string::npos);
  ModelConfig moe = small("llama");
  moe.family = "mixtral";
  const auto mm = gguf_metadata_of(moe);
  ASSERT_FALSE(mm.ok());
  EXPECT_NE(mm.error().message.find("mixtral"), std::string::npos);
}

}  // namespace
}  // namespace ib
