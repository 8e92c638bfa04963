// GGUF as a model: metadata -> ModelConfig, tensor names -> HF names and engine roles, and the
// tokenizer, on small hand-made files.
#include <gtest/gtest.h>

#include "model/gguf.h"

namespace ib {
namespace {

using V = GgufValueType;

GgufValue u32(uint64_t v) {
  return GgufValue::of_uint(V::kU32, v);
}
GgufValue f32(double v) {
  return GgufValue::of_float(V::kF32, v);
}

GgufTensorInfo tensor(std::string name) {
  return GgufTensorInfo{std::move(name), GgmlType::kF16, {32, 4}, 0, 256};
}

// Llama-3-8B's published GGUF metadata, with a 5-token vocabulary.
GgufFile llama3_8b() {
  GgufFile f;
  f.metadata = {
      {"general.architecture", GgufValue::of_string("llama")},
      {"llama.context_length", u32(8192)},
      {"llama.embedding_length", u32(4096)},
      {"llama.block_count", u32(32)},
      {"llama.feed_forward_length", u32(14336)},
      {"llama.attention.head_count", u32(32)},
      {"llama.attention.head_count_kv", u32(8)},
      {"llama.rope.freq_base", f32(500000.0)},
      {"llama.rope.dimension_count", u32(128)},
      {"llama.attention.layer_norm_rms_epsilon", f32(1e-5)},
      {"tokenizer.ggml.tokens", GgufValue::of_strings({"a", "b", "c", "d", "e"})},
      {"tokenizer.ggml.bos_token_id", u32(3)},
      {"tokenizer.ggml.eos_token_id", u32(4)},
  };
  f.tensors = {tensor("token_embd.weight"), tensor("output.weight"), tensor("blk.0.attn_q.weight")};
  return f;
}

void set(GgufFile& f, const std::string& key, GgufValue v) {
  for (auto& m : f.metadata) {
    if (m.key == key) {
      m.value = std::move(v);
      return;
    }
  }
  f.metadata.push_back({key, std::move(v)});
}

void rename_arch(GgufFile& f, const std::string& arch) {
  for (auto& m : f.metadata) {
    if (m.key.rfind("llama.", 0) == 0) m.key = arch + m.key.substr(5);
  }
  set(f, "general.architecture", GgufValue::of_string(arch));
}

TEST(GgufConfig, Llama3MetadataBecomesTheConfig) {
  const auto c = gguf_model_config(llama3_8b(), "llama3.gguf");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->family, "llama");
  EXPECT_EQ(c->hf_architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->max_position_embeddings, 8192);
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->num_layers, 32);
  EXPECT_EQ(c->intermediate_size, 14336);
  EXPECT_EQ(c->num_heads, 32);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->partial_rotary_factor, 1.0);
  EXPECT_FLOAT_EQ(static_cast<float>(c->rms_norm_eps), 1e-5f);
  EXPECT_EQ(c->vocab_size, 5);
  EXPECT_EQ(c->bos_token_id, 3);
  EXPECT_EQ(c->eos_token_ids, std::vector<int>{4});
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
}

TEST(GgufConfig, Qwen2AndPhi3) {
  GgufFile q = llama3_8b();
  rename_arch(q, "qwen2");
  q.metadata.erase(q.metadata.begin() + 9);  // no rms epsilon: Qwen2's default 1e-6
  q.tensors = {tensor("token_embd.weight"), tensor("blk.0.attn_q.bias")};
  const auto qc = gguf_model_config(q, "qwen2.gguf");
  ASSERT_TRUE(qc.ok()) << qc.error().message;
  EXPECT_EQ(qc->hf_architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(qc->tie_word_embeddings);  // no output.weight
  EXPECT_TRUE(qc->attention_bias);
  EXPECT_EQ(qc->rms_norm_eps, 1e-6);

  GgufFile p = llama3_8b();
  rename_arch(p, "phi3");
  set(p, "phi3.attention.head_count_kv", u32(32));
  set(p, "phi3.rope.dimension_count", u32(64));
  set(p, "phi3.attention.sliding_window", u32(2047));
  const auto pc = gguf_model_config(p, "phi3.gguf");
  ASSERT_TRUE(pc.ok()) << pc.error().message;
  EXPECT_EQ(pc->hf_architecture, "Phi3ForCausalLM");
  EXPECT_EQ(pc->num_kv_heads, 32);
  EXPECT_EQ(pc->partial_rotary_factor, 0.5);
  EXPECT_EQ(pc->sliding_window, 2047);
}

TEST(GgufConfig, VocabSizeFallsBackToTheEmbedding) {
  GgufFile f = llama3_8b();
  f.metadata.erase(f.metadata.begin() + 10);  // tokenizer.ggml.tokens
  f.tensors[0].dims = {4096, 128256};
  const auto c = gguf_model_config(f, "m.gguf");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->vocab_size, 128256);
}

std::string config_error(const GgufFile& f) {
  const auto c = gguf_model_config(f, "m.gguf");
  EXPECT_FALSE(c.ok());
  return c.ok() ? std::string() : c.error().message;
}

TEST(GgufConfig, ErrorsNameTheArchitectureOrTheKey) {
  GgufFile f = llama3_8b();
  set(f, "general.architecture", GgufValue::of_string("mamba"));
  std::string e = config_error(f);
  EXPECT_NE(e.find("'mamba'"), std::string::npos) << e;
  EXPECT_NE(e.find("llama, qwen2, phi3"), std::string::npos) << e;
  f = llama3_8b();
  f.metadata.erase(f.metadata.begin() + 3);  // llama.block_count
  e = config_error(f);
  EXPECT_NE(e.find("'llama.block_count' is missing"), std::string::npos) << e;
  f = llama3_8b();
  set(f, "llama.embedding_length", GgufValue::of_string("4096"));
  e = config_error(f);
  EXPECT_NE(e.find("'llama.embedding_length' must be a positive integer"), std::string::npos);
  f = llama3_8b();
  f.tensors.push_back(tensor("rope_freqs.weight"));
  e = config_error(f);
  EXPECT_NE(e.find("rope_freqs.weight"), std::string::npos) << e;
}

TEST(GgufTensorNames, MapToTheHfNamesAndRolesOfTheWeightSchemas) {
  const struct {
    const char* gguf;
    const char* arch;
    const char* hf;
    const char* role;
    int layer;
    bool permuted;
  } cases[] = {
      {"token_embd.weight", "llama", "model.embed_tokens.weight", "embed", -1, false},
      {"output_norm.weight", "llama", "model.norm.weight", "final_norm", -1, false},
      {"output.weight", "qwen2", "lm_head.weight", "lm_head", -1, false},
      {"blk.0.attn_norm.weight", "llama", "model.layers.0.input_layernorm.weight", "attn_norm", 0,
       false},
      {"blk.3.attn_q.weight", "llama", "model.layers.3.self_attn.q_proj.weight", "qkv", 3, true},
      {"blk.3.attn_k.weight", "llama", "model.layers.3.self_attn.k_proj.weight", "qkv", 3, true},
      {"blk.3.attn_q.weight", "qwen2", "model.layers.3.self_attn.q_proj.weight", "qkv", 3, false},
      {"blk.12.attn_v.weight", "llama", "model.layers.12.self_attn.v_proj.weight", "qkv", 12,
       false},
      {"blk.1.attn_k.bias", "qwen2", "model.layers.1.self_attn.k_proj.bias", "qkv_bias", 1, false},
      {"blk.1.attn_qkv.weight", "phi3", "model.layers.1.self_attn.qkv_proj.weight", "qkv", 1,
       false},
      {"blk.1.attn_output.weight", "phi3", "model.layers.1.self_attn.o_proj.weight", "o", 1, false},
      {"blk.2.ffn_norm.weight", "llama", "model.layers.2.post_attention_layernorm.weight",
       "ffn_norm", 2, false},
      {"blk.2.ffn_gate.weight", "llama", "model.layers.2.mlp.gate_proj.weight", "gate_up", 2,
       false},
      {"blk.2.ffn_up.weight", "llama", "model.layers.2.mlp.up_proj.weight", "gate_up", 2, false},
      {"blk.2.ffn_up.weight", "phi3", "model.layers.2.mlp.gate_up_proj.weight", "gate_up", 2,
       false},
      {"blk.2.ffn_down.weight", "qwen2", "model.layers.2.mlp.down_proj.weight", "down", 2, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.gguf) + " " + c.arch);
    const auto m = map_gguf_tensor(c.gguf, c.arch);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->hf_name, c.hf);
    EXPECT_EQ(m->role, c.role);
    EXPECT_EQ(m->layer, c.layer);
    EXPECT_EQ(m->rope_permuted, c.permuted);
  }
  for (const char* bad :
       {"blk.x.attn_q.weight", "blk.1", "blk.-1.attn_q.weight", "blk.1.attn_qkv.weight",
        "rope_freqs.weight", "blk.0.ffn_gate_exps.weight"}) {
    const auto m = map_gguf_tensor(bad, "llama");
    ASSERT_FALSE(m.ok()) << bad;
    EXPECT_NE(m.error().message.find(std::string("'") + bad + "'"), std::string::npos);
  }
}

TEST(GgufTensorNames, UndoesTheConvertersRopeRowOrder) {
  // llama.cpp's converter views each head's HF rows as (2, head_dim / 2), swaps the two axes and
  // flattens: HF row (half i, index j) lands at 2 * j + i. Build that order and invert it.
  const int64_t head_dim = 8;
  const int64_t heads = 2;
  std::vector<int64_t> gguf_to_hf(static_cast<size_t>(heads * head_dim));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < head_dim / 2; ++j) {
        gguf_to_hf[static_cast<size_t>(h * head_dim + 2 * j + i)] =
            h * head_dim + i * head_dim / 2 + j;
      }
    }
  }
  for (int64_t r = 0; r < heads * head_dim; ++r) {
    EXPECT_EQ(hf_row_of_gguf_rope_row(r, head_dim), gguf_to_hf[static_cast<size_t>(r)]) << r;
  }
  EXPECT_EQ(hf_row_of_gguf_rope_row(1, 8), 4);  // GGUF row 1 is the second half's first row
}

// A GPT-2-style vocabulary in id order (Ġ is the mapped space byte), ranked merges that build
// "hello", " world" and "12", a control token and a user-defined one.
GgufFile tiny_bpe(const std::string& pre) {
  GgufFile f;
  const std::vector<std::string> tokens = {
      "h",  "e",  "l",    "o",  "Ġ",      "w", "r",       "d",      "he", "ll", "hell", "hello",
      "Ġw", "or", "Ġwor", "ld", "Ġworld", "!", "<|end|>", "<tool>", "1",  "2",  "12"};
  std::vector<GgufValue> types;
  for (const auto& t : tokens) {
    types.push_back(GgufValue::of_int(V::kI32, t == "<|end|>" ? 3 : t == "<tool>" ? 4 : 1));
  }
  f.metadata = {
      {"tokenizer.ggml.model", GgufValue::of_string("gpt2")},
      {"tokenizer.ggml.pre", GgufValue::of_string(pre)},
      {"tokenizer.ggml.tokens", GgufValue::of_strings(tokens)},
      {"tokenizer.ggml.token_type", GgufValue::of_array(V::kI32, types)},
      {"tokenizer.ggml.merges", GgufValue::of_strings({"h e", "l l", "he ll", "hell o", "Ġ w",
                                                       "o r", "Ġw or", "l d", "Ġwor ld", "1 2"})},
  };
  return f;
}

using Ids = std::vector<int32_t>;

TEST(GgufTokenizer, Gpt2BpeFromTokensMergesAndTypes) {
  const auto t = gguf_tokenizer(tiny_bpe("gpt-2"), "m.gguf");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ((*t)->encode("hello world!"), (Ids{11, 16, 17}));
  EXPECT_EQ((*t)->encode("hell"), (Ids{10}));
  EXPECT_EQ((*t)->encode("hello<|end|><tool>"), (Ids{11, 18, 19}));
  EXPECT_EQ((*t)->decode({11, 18, 16, 19}), "hello world<tool>");  // control tokens dropped
  EXPECT_EQ((*t)->encode("12"), (Ids{22}));  // GPT-2's split keeps digits together
}

TEST(GgufTokenizer, PreTokenizerFollowsTokenizerGgmlPre) {
  const auto qwen2 = gguf_tokenizer(tiny_bpe("qwen2"), "m.gguf");
  ASSERT_TRUE(qwen2.ok()) << qwen2.error().message;
  EXPECT_EQ((*qwen2)->encode("12"), (Ids{20, 21}));  // Qwen2 splits one digit per piece
  const auto llama3 = gguf_tokenizer(tiny_bpe("llama-bpe"), "m.gguf");
  ASSERT_TRUE(llama3.ok()) << llama3.error().message;
  EXPECT_EQ((*llama3)->encode("hello world!"), (Ids{11, 16, 17}));
  EXPECT_EQ((*llama3)->encode("12"), (Ids{22}));  // up to three digits per piece
}

std::string tokenizer_error(const GgufFile& f) {
  const auto t = gguf_tokenizer(f, "m.gguf");
  EXPECT_FALSE(t.ok());
  return t.ok() ? std::string() : t.error().message;
}

// A SentencePiece "llama" tokenizer: ▁-prefixed pieces whose scores order the merges, <0xNN>
// byte tokens for 中, <unk>/<s>/</s> and a user-defined token.
GgufFile tiny_spm(bool add_bos) {
  GgufFile f;
  const std::vector<std::string> tokens = {"<unk>",
                                           "<s>",
                                           "</s>",
                                           "<0xE4>",
                                           "<0xB8>",
                                           "<0xAD>",
                                           "\xE2\x96\x81",
                                           "h",
                                           "e",
                                           "l",
                                           "o",
                                           "\xE2\x96\x81h",
                                           "el",
                                           "\xE2\x96\x81hel",
                                           "lo",
                                           "\xE2\x96\x81hello",
                                           "<|user|>",
                                           "ll",
                                           "hell"};
  const std::vector<int64_t> type_ids = {2, 3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 1, 1};
  // ▁h > el > ▁hel > lo > ▁hello; "ll" and "hell" score lowest, so hell+o never wins.
  const std::vector<double> score_values = {0,  0,  0,  0,  0,  0,   -1, -2,  -3, -4,
                                            -5, -6, -7, -8, -9, -10, 0,  -50, -60};
  std::vector<GgufValue> types;
  std::vector<GgufValue> scores;
  for (size_t i = 0; i < tokens.size(); ++i) {
    types.push_back(GgufValue::of_int(V::kI32, type_ids[i]));
    scores.push_back(GgufValue::of_float(V::kF32, score_values[i]));
  }
  f.metadata = {
      {"tokenizer.ggml.model", GgufValue::of_string("llama")},
      {"tokenizer.ggml.tokens", GgufValue::of_strings(tokens)},
      {"tokenizer.ggml.token_type", GgufValue::of_array(V::kI32, types)},
      {"tokenizer.ggml.scores", GgufValue::of_array(V::kF32, scores)},
      {"tokenizer.ggml.bos_token_id", GgufValue::of_uint(V::kU32, 1)},
      {"tokenizer.ggml.eos_token_id", GgufValue::of_uint(V::kU32, 2)},
      {"tokenizer.ggml.add_bos_token", GgufValue::of_bool(add_bos)},
  };
  return f;
}

TEST(GgufTokenizer, LlamaSentencePieceFromTokensScoresAndTypes) {
  const auto t = gguf_tokenizer(tiny_spm(true), "m.gguf");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ((*t)->encode("hello"), (Ids{1, 15}));
  EXPECT_EQ((*t)->encode("hello \xE4\xB8\xAD"), (Ids{1, 15, 6, 3, 4, 5}));  // byte fallback
  EXPECT_EQ((*t)->encode("<|user|>hello"), (Ids{1, 16, 15}));
  EXPECT_EQ((*t)->decode((*t)->encode("hello \xE4\xB8\xAD")), "hello \xE4\xB8\xAD");
  const auto no_bos = gguf_tokenizer(tiny_spm(false), "m.gguf");
  ASSERT_TRUE(no_bos.ok()) << no_bos.error().message;
  EXPECT_EQ((*no_bos)->encode("hello"), (Ids{15}));
  GgufFile f = tiny_spm(true);
  f.metadata.erase(f.metadata.begin() + 3);  // tokenizer.ggml.scores
  const auto missing = gguf_tokenizer(f, "m.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("tokenizer.ggml.scores"), std::string::npos);
}

TEST(GgufTokenizer, RefusesWhatItCannotRunNamingIt) {
  GgufFile f = tiny_bpe("gpt-2");
  f.metadata[0].value = GgufValue::of_string("bert");
  std::string e = tokenizer_error(f);
  EXPECT_NE(e.find("'bert'"), std::string::npos) << e;
  e = tokenizer_error(tiny_bpe("smaug-bpe"));
  EXPECT_NE(e.find("'smaug-bpe'"), std::string::npos) << e;
  f = tiny_bpe("gpt-2");
  f.metadata.pop_back();
  e = tokenizer_error(f);
  EXPECT_NE(e.find("tokenizer.ggml.merges"), std::string::npos) << e;
  f = tiny_bpe("gpt-2");
  f.metadata[3].value = GgufValue::of_array(V::kI32, {GgufValue::of_int(V::kI32, 1)});
  e = tokenizer_error(f);
  EXPECT_NE(e.find("token_type has 1 entries for 23 tokens"), std::string::npos) << e;
}

}  // namespace
}  // namespace ib
