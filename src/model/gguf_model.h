// A GGUF file as an inferbench model (part of the gguf.h front door): its metadata as a
// ModelConfig, its tensor names as the HF names and engine roles the weight schemas use, and its
// tokenizer. Architectures: llama, qwen2, phi3.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "model/config.h"
#include "model/gguf_file.h"
#include "model/tokenizer.h"

namespace ib {

// general.architecture and the <arch>.* keys (context_length, embedding_length, block_count,
// feed_forward_length, attention.head_count[_kv], attention.key_length, rope.freq_base,
// rope.dimension_count, attention.layer_norm_rms_epsilon, attention.sliding_window), the vocab
// size from tokenizer.ggml.tokens (else <arch>.vocab_size, else token_embd.weight), bos / eos ids,
// tied embeddings when output.weight is absent, q/k/v biases when blk.0.attn_q.bias is present.
// User errors name the file and the key: an unknown architecture (naming the supported ones), a
// missing or mistyped key, RoPE frequency-factor tensors (Llama-3.1 / Phi-3 128k scaling).
Result<ModelConfig> gguf_model_config(const GgufFile& file, const std::string& name);

// Where a GGUF tensor goes: the HF name the engine's weight schema reads, the engine's role
// (weight_role_name: "embed", "qkv", "gate_up", ...) and the layer (-1: whole-model).
// GGUF dims are HF's shape reversed ({in, out} for an HF (out, in) matrix).
struct GgufTensorMapping {
  std::string hf_name;
  std::string_view role;
  int layer = -1;
  // llama's attn_q / attn_k: llama.cpp's converter reorders each head's rows for its interleaved
  // RoPE; HF row hf_row_of_gguf_rope_row(r, head_dim) is GGUF row r.
  bool rope_permuted = false;
};
// token_embd, output_norm, output and blk.N.{attn_norm, attn_q, attn_k, attn_v (weight and bias),
// attn_qkv (phi3), attn_output, ffn_norm, ffn_gate, ffn_up (phi3: gate and up fused), ffn_down}.
// User error naming the tensor for any other name.
Result<GgufTensorMapping> map_gguf_tensor(std::string_view gguf_name,
                                          std::string_view architecture);
int64_t hf_row_of_gguf_rope_row(int64_t gguf_row, int64_t head_dim);

// tokenizer.ggml.*: model "gpt2" (byte-level BPE: tokens, merges, token_type; control tokens are
// special, user-defined ones added) with pre "llama-bpe" / "llama3", "qwen2", "gpt-2" or
// "default", or model "llama" (SentencePiece BPE: tokens, scores, token_type, BOS/EOS ids and
// add_bos/eos_token; Llama-2, Mistral, Phi-3) becomes the project's BPE tokenizer. User errors
// name what is refused: another model or pre-tokenizer, missing or mistyped keys.
Result<std::unique_ptr<Tokenizer>> gguf_tokenizer(const GgufFile& file, const std::string& origin);

// --model as a GGUF file: true for a file with the GGUF magic (is_gguf_file) or any path ending
// in ".gguf", so a missing or damaged one gets the reader's error rather than "unknown preset".
bool names_gguf_file(const std::string& model);
// --model FILE.gguf: gguf_model_config (named by the path), once the engine is known to read the
// whole file: its header parses (tensor types included), every tensor name maps
// (map_gguf_tensor) and its tokenizer, when it has one (tokenizer.ggml.model), is one
// gguf_tokenizer builds. User errors name the file and what is refused.
Result<ModelConfig> load_gguf_config(const std::string& path);
// Whether path is a readable GGUF file with a tokenizer (tokenizer.ggml.model).
bool gguf_has_tokenizer(const std::string& path);
// The tokenizer of a GGUF file: gguf_tokenizer when it has tokenizer.ggml.model, else the byte
// fallback (as for a model directory without tokenizer.json).
Result<std::unique_ptr<Tokenizer>> load_gguf_tokenizer(const std::string& path);

// The inverse of gguf_model_config: a config as GGUF metadata (llama and mistral as llama, qwen2,
// phi3). User errors name what GGUF cannot say: another family, llama3 RoPE scaling.
Result<std::vector<GgufMetadata>> gguf_metadata_of(const ModelConfig& config);

// A GGUF file of config with seeded weights in llama.cpp's names and layouts: the embedding,
// lm_head (unless tied) and every projection matrix in matmul_type, norms (ones) and biases in
// F32. Values as the engine's dummy weights scale them (uniform, the embedding in [-1, 1), each
// other matrix in [-a, a) with a = sqrt(3 / fan_in)), biases in [-0.05, 0.05). Written atomically.
// User error when a matrix's rows (ne[0]: hidden, q_dim or the FFN size) are not whole blocks of
// matmul_type, naming the tensor.
Status write_dummy_gguf(const std::string& path, const ModelConfig& config, GgmlType matmul_type,
                        uint64_t seed);

// The ggml type of each matrix of a dummy GGUF file: one type for all, or llama.cpp's K-quant
// "_M" mixes as its quantizer assigns them (Q4_K_M / Q5_K_M: output.weight, and attn_v and
// ffn_down in the first and last eighth of the layers and every third layer between, in Q6_K;
// the other matrices in Q4_K / Q5_K).
struct GgufTypeMix {
  GgmlType base = GgmlType::kF32;
  bool k_m = false;  // the _M mix of base (Q4_K or Q5_K)
  GgmlType type_of(std::string_view tensor, int layer, int num_layers) const;
};
// "Q4_K_M", "Q5_K_M" or a type's name (ggml_type_of_name); user error naming the choices.
Result<GgufTypeMix> gguf_type_mix(std::string_view name);
// write_dummy_gguf with each matrix in mix's type; the matrices are quantized on threads threads.
Status write_dummy_gguf(const std::string& path, const ModelConfig& config, const GgufTypeMix& mix,
                        uint64_t seed, int threads = 1);

}  // namespace ib
