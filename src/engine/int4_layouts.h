// Published 4-bit checkpoints unpacked on the host into backend/weight.h's layouts (kInt4W4A16:
// AutoAWQ GEMM, GPTQ, compressed-tensors pack-quantized W4A16; kNf4: bitsandbytes), one matmul
// source X.weight (N, K) at a time. Each source's rows are whole in K (groups run along K), so
// the sources of a fused weight (q/k/v, gate/up) concatenate by rows after unpacking.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace ib {

// One source (N, K) in weight.h's layout, groups of G along K.
struct Host4bitWeight {
  std::vector<uint8_t> data;        // (N, K / 2) two codes per byte, the format's nibble order
  std::vector<uint16_t> scales;     // kInt4W4A16: (N, K / G) f16 bits
  std::vector<float> absmax;        // kNf4: (N, K / G), double quantization expanded
  std::vector<uint8_t> zeros;       // kInt4W4A16: (N, K / G), z in [0, 15]
  std::vector<int32_t> input_perm;  // act-order: (K), column j reads input feature perm[j]
};

// The tensors a 4-bit checkpoint (q.packing) holds in place of the matmul weight weight_name
// ("model.layers.0.self_attn.q_proj.weight"): those it must hold, and those it may.
struct Int4TensorNames {
  std::vector<std::string> required;
  std::vector<std::string> optional;
};
Int4TensorNames int4_tensor_names(const CheckpointQuantization& q, const std::string& weight_name);

// Reads weight_name's tensors from ckpt and unpacks them, the source being (n, k) in groups of
// group_size (k: one per row). A tensor whose dtype or shape contradicts config.json's bits and
// group size, or the model's (n, k), is a user error naming it.
Result<Host4bitWeight> unpack_4bit(const CheckpointQuantization& q,
                                   const SafetensorsCheckpoint& ckpt,
                                   const std::string& weight_name, int64_t n, int64_t k,
                                   int64_t group_size);

}  // namespace ib
