// Shared by the engine's gpu-labelled tests: the visible skip without a CUDA device, and a small
// Llama-shaped model that satisfies the CUDA kernels' shape rules (head_dim 64, K % 64 == 0)
// while the CPU reference engine stays fast.
#pragma once

#include <gtest/gtest.h>

#include "backend/cuda/cuda_backend.h"
#include "engine/detail/engine_test_support.h"

#define IB_REQUIRE_CUDA()                                                                   \
  do {                                                                                      \
    if (::ib::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU test skipped"; \
  } while (0)

namespace ib::testing {

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

}  // namespace ib::testing
