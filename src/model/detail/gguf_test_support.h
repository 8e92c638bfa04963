// Test support (engine and cli tests): small GGUF models as llama.cpp would publish them, written
// with write_dummy_gguf and then re-stored in a mix of ggml types, with a byte-level BPE
// tokenizer in tokenizer.ggml.*.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/assert.h"

#include "model/gguf.h"

namespace ib::testing {

// Tiny models of each GGUF architecture (2 layers, 4 heads, context 256, BOS 0, EOS 1): llama
// untied with K-quant-sized rows (hidden 256, FFN 512, head_dim 64; attn_q / attn_k
// rope-permuted), qwen2 tied with q/k/v biases (hidden 64, FFN 128), phi3 untied with attn_qkv
// and ffn_up (gate and up) fused (hidden 64, FFN 256).
inline ModelConfig test_gguf_config(std::string_view family) {
  struct Shape {
    std::string_view family;
    const char* hf_architecture;
    int vocab, hidden, ffn, kv_heads, head_dim;
    bool bias, tied;
  };
  constexpr Shape kShapes[] = {
      {"llama", "LlamaForCausalLM", 128, 256, 512, 2, 64, false, false},
      {"qwen2", "Qwen2ForCausalLM", 160, 64, 128, 2, 16, true, true},
      {"phi3", "Phi3ForCausalLM", 128, 64, 256, 4, 16, false, false},
  };
  for (const Shape& s : kShapes) {
    if (s.family != family) continue;
    ModelConfig c;
    c.name = "tiny-" + std::string(family);
    c.family = family;
    c.hf_architecture = s.hf_architecture;
    c.vocab_size = s.vocab;
    c.hidden_size = s.hidden;
    c.intermediate_size = s.ffn;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = s.kv_heads;
    c.head_dim = s.head_dim;
    c.attention_bias = s.bias;
    c.tie_word_embeddings = s.tied;
    c.max_position_embeddings = 256;
    c.bos_token_id = 0;
    c.eos_token_ids = {1};
    return c;
  }
  IB_ASSERT(false, "test_gguf_config: llama, qwen2 or phi3");
  return {};
}

// The type a test file stores a tensor in, so that one model covers every reader path:
// token_embd F16, output Q8_0, output_norm BF16, other vectors F32; attn_q / attn_k Q8_0 (the
// rope-permuted rows, quantized), attn_v Q4_0, attn_output F16, attn_qkv Q8_0; ffn_gate Q4_K,
// ffn_up Q5_K and ffn_down Q6_K where rows are whole 256-element blocks, else Q8_0.
inline GgmlType test_gguf_type(const GgufTensorInfo& t) {
  const std::string& n = t.name;
  if (t.dims.size() == 1) return n == "output_norm.weight" ? GgmlType::kBF16 : GgmlType::kF32;
  if (n == "token_embd.weight" || n.ends_with("attn_output.weight")) return GgmlType::kF16;
  if (n.ends_with("attn_v.weight")) return GgmlType::kQ4_0;
  const bool k_quant = t.dims[0] % 256 == 0;
  if (k_quant && n.ends_with("ffn_gate.weight")) return GgmlType::kQ4_K;
  if (k_quant && n.ends_with("ffn_up.weight")) return GgmlType::kQ5_K;
  if (k_quant && n.ends_with("ffn_down.weight")) return GgmlType::kQ6_K;
  return GgmlType::kQ8_0;
}

// A GPT-2-style byte-level BPE of vocab tokens: <s> (id 0) and </s> (id 1) as control tokens,
// the printable ASCII bytes, Ġ (the space byte), a few merges ("hello", " world"), then unused
// filler tokens up to vocab (at least 106).
inline std::vector<GgufMetadata> test_gguf_tokenizer(int vocab) {
  std::vector<std::string> tokens = {"<s>", "</s>"};
  for (char ch = '!'; ch <= '~'; ++ch) tokens.emplace_back(1, ch);
  tokens.emplace_back("\xC4\xA0");  // Ġ
  const std::vector<std::string> merges = {"h e",          "l l",        "he ll",
                                           "hell o",       "\xC4\xA0 w", "o r",
                                           "\xC4\xA0w or", "l d",        "\xC4\xA0wor ld"};
  for (const std::string& m : merges)
    tokens.push_back(m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1));
  while (static_cast<int>(tokens.size()) < vocab) {
    tokens.push_back("<unused" + std::to_string(tokens.size()) + ">");
  }
  std::vector<GgufValue> types;
  for (size_t id = 0; id < tokens.size(); ++id) {
    types.push_back(GgufValue::of_int(GgufValueType::kI32, id < 2 ? 3 : 1));
  }
  return {
      {"tokenizer.ggml.model", GgufValue::of_string("gpt2")},
      {"tokenizer.ggml.pre", GgufValue::of_string("llama-bpe")},
      {"tokenizer.ggml.tokens", GgufValue::of_strings(tokens)},
      {"tokenizer.ggml.token_type", GgufValue::of_array(GgufValueType::kI32, types)},
      {"tokenizer.ggml.merges", GgufValue::of_strings(merges)},
  };
}

// Copies the GGUF file from to to (the same path is fine), its metadata and tensors passed
// through edit(metadata, tensors), which returns a Status, on the way.
template <typename Edit>
Status copy_gguf(const std::string& from, const std::string& to, Edit edit) {
  std::vector<GgufMetadata> metadata;
  std::vector<GgufWriteTensor> tensors;
  {
    IB_ASSIGN_OR_RETURN(const auto file, GgufModelFile::open(from));
    metadata = file->file().metadata;
    for (const GgufTensorInfo& t : file->file().tensors) {
      tensors.push_back({t.name, t.type, t.dims, std::string(file->tensor_bytes(t))});
    }
  }
  IB_TRY(edit(metadata, tensors));
  return write_gguf(to, metadata, tensors);
}

// write_dummy_gguf(config, seed) with every tensor re-stored as test_gguf_type says (the values
// quantized from the dummy ones) and test_gguf_tokenizer(vocab_size) (config.vocab_size must be
// at least 106, bos / eos 0 and 1).
inline Status write_test_gguf(const std::string& path, const ModelConfig& config, uint64_t seed) {
  IB_TRY(write_dummy_gguf(path, config, GgmlType::kF32, seed));
  return copy_gguf(path, path, [&](auto& metadata, auto& tensors) -> Status {
    for (GgufWriteTensor& t : tensors) {
      GgufTensorInfo info{t.name, t.type, t.dims};
      std::vector<float> values(static_cast<size_t>(info.numel()));
      IB_TRY(dequantize_ggml(t.type, t.bytes, values));
      t.type = test_gguf_type(info);
      IB_ASSIGN_OR_RETURN(t.bytes, quantize_ggml(t.type, values));
    }
    for (GgufMetadata& m : test_gguf_tokenizer(config.vocab_size)) metadata.push_back(m);
    return Ok{};
  });
}

}  // namespace ib::testing
