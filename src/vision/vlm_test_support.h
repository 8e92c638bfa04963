// Test support shared by the vision-language engine tests (llava_engine_test, qwen2vl_test): a
// tiny language model's seeded tensors under transformers' model.language_model. names, kept
// as the double reference reads them, and small helpers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "engine/detail/reference_model.h"
#include "engine/engine.h"

namespace ib::vlm_test {

// n values uniform in [center - scale, center + scale].
std::vector<float> seeded(Rng& rng, int64_t n, float center, float scale);
// The raw bytes of values (a safetensors F32 payload).
std::string bytes_of(const std::vector<float>& values);
double max_abs_diff(const std::vector<float>& got, const std::vector<double>& want);

// A decoder of hidden d, kv_width = KV heads x head_dim, FFN f, vocabulary vocab and layers
// layers, seeded from seed: each tensor is handed to add(name, shape, values) under
// model.language_model. (lm_head.weight at the top), q/k/v biases when qkv_bias.
struct TinyText {
  int64_t d = 64, kv_width = 32, f = 128, vocab = 101;
  int layers = 2;
  bool qkv_bias = false;
};
using AddTensor =
    std::function<void(const std::string&, std::vector<int64_t>, const std::vector<float>&)>;
testing::HostWeights tiny_text_model(const TinyText& dims, uint64_t seed, const AddTensor& add);

// The engine of a checkpoint directory as the CLI builds it: config.json through
// parse_hf_config (into model), the safetensors weights, logits captured, chunk tokens a step,
// 4 sequences, a pool of kv_blocks 16-token blocks (0: from 8 MiB, max_model_len max_len), over
// tensor_parallel_size ranks (CPU threads beside backend's).
Result<std::unique_ptr<Engine>> load_engine(const std::string& dir, Backend& backend, int chunk,
                                            int kv_blocks, int max_len, ModelConfig& model,
                                            int tensor_parallel_size = 1);

}  // namespace ib::vlm_test
