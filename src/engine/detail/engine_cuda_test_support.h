// Shared by the engine's gpu-labelled tests: the visible skip without a CUDA device, a small
// Llama-shaped model that satisfies the CUDA kernels' shape rules (head_dim 64, K % 64 == 0)
// while the CPU reference engine stays fast (and its Mixtral variant), and the CPU weights
// copied into a CUDA engine's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/dtype.h"
#include "engine/detail/engine_test_support.h"

#define IB_REQUIRE_CUDA()                                                                   \
  do {                                                                                      \
    if (::ib::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU test skipped"; \
  } while (0)

namespace ib::testing {

// A backend created with the kernel switch `name` set to `value` in the environment (the backend
// reads its switches once, when it is created); an empty value leaves the environment alone.
inline Result<std::unique_ptr<Backend>> create_backend_with_switch(const BackendOptions& options,
                                                                   const char* name,
                                                                   const std::string& value) {
  if (!value.empty()) ::setenv(name, value.c_str(), 1);
  auto backend = create_backend(options);
  if (!value.empty()) ::unsetenv(name);
  return backend;
}

// 2 layers, hidden 256, 4 heads of 64, 2 KV heads, FFN 512, vocab 512.
inline ModelConfig small_cuda_config(const char* name) {
  ModelConfig c = tiny_config();
  c.name = name;
  c.vocab_size = 512;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.max_position_embeddings = 512;
  return c;
}

// The small CUDA model as a Mixtral: 8 experts of FFN 384, top-2.
inline ModelConfig small_cuda_mixtral(const char* name) {
  ModelConfig c = small_cuda_config(name);
  c.family = "mixtral";
  c.hf_architecture = "MixtralForCausalLM";
  c.moe.num_experts = 8;
  c.moe.experts_per_token = 2;
  c.moe.expert_intermediate_size = 384;
  return c;
}

// Every weight tensor of a dense model (unquantized), in a fixed order.
inline std::vector<Tensor> all_weight_tensors(const ModelConfig& c, const ModelWeights& w) {
  std::vector<Tensor> out = {w.embed, w.final_norm};
  if (!c.tie_word_embeddings) out.push_back(w.lm_head.data);
  for (const LayerWeights& l : w.layers) {
    for (const Tensor& t : {l.attn_norm, l.wqkv.data, l.bqkv, l.wo.data, l.ffn_norm,
                            l.w_gate_up.data, l.w_down.data, l.router.data}) {
      if (!t.empty()) out.push_back(t);
    }
    for (const WeightRef& x : l.expert_gate_up) out.push_back(x.data);
    for (const WeightRef& x : l.expert_down) out.push_back(x.data);
  }
  return out;
}

// The CPU weights, rounded in place to dtype, then the same values uploaded to the CUDA weights.
inline void share_weights(const ModelConfig& c, ModelWeights& cpu_w, CpuBackend& cpu,
                          ModelWeights& gpu_w, Backend& gpu, DType dtype) {
  const std::vector<Tensor> from = all_weight_tensors(c, cpu_w);
  const std::vector<Tensor> to = all_weight_tensors(c, gpu_w);
  ASSERT_EQ(from.size(), to.size());
  for (size_t i = 0; i < from.size(); ++i) {
    ASSERT_EQ(from[i].numel(), to[i].numel());
    std::vector<float> v(static_cast<size_t>(from[i].numel()));
    cpu.copy_to_host(from[i], v.data());
    if (dtype == DType::kBF16) {
      for (float& x : v) x = round_to_bf16(x);
    }
    cpu.copy_from_host(from[i], v.data(), DType::kF32);
    gpu.copy_from_host(to[i], v.data(), DType::kF32);
  }
  gpu.synchronize();
}

}  // namespace ib::testing
