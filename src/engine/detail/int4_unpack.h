// Internal to engine/int4_layouts*.cpp: reading a 4-bit checkpoint's tensors with their dtype and
// shape checked against config.json's quantization and the model's (N, K), each mismatch a user
// error naming the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/int4_layouts.h"

namespace ib::detail {

int32_t i32_at(const HostTensorRef& t, int64_t i);
// A float scale (f16, bf16 or f32) as f16 bits (f16 as stored; others rounded to nearest even).
uint16_t f16_bits_at(const HostTensorRef& t, int64_t i);
float f32_at(const HostTensorRef& t, int64_t i);

struct ShapeCheck {
  const SafetensorsCheckpoint& ckpt;
  const CheckpointQuantization& q;
  int64_t n = 0;  // the source's output features
  int64_t k = 0;  // its input features
  int64_t g = 0;  // its group size

  // Whether (n, k) packs in this layout (8 codes per int32 along the packed dimension, whole
  // groups), naming weight_name otherwise.
  Status divisible(const std::string& weight_name) const;
  // The tensor, which must be dtype with this shape.
  Result<HostTensorRef> get(const std::string& name, DType dtype,
                            const std::vector<int64_t>& shape) const;
  // The tensor, which must hold numel elements of dtype (any shape).
  Result<HostTensorRef> get_flat(const std::string& name, DType dtype, int64_t numel) const;
  // The tensor, which must be f16, bf16 or f32 with this shape.
  Result<HostTensorRef> get_float(const std::string& name, const std::vector<int64_t>& shape) const;
  // compressed-tensors' weight_shape: two integers (I64 or I32) equal to [n, k].
  Status weight_shape(const std::string& name, int64_t rows, int64_t cols) const;
  // "config.json's gptq quantization (4-bit, groups of 128) of a (4096, 4096) weight"
  std::string context() const;
};

// bitsandbytes NF4 (int4_layouts_nf4.cpp).
Int4TensorNames nf4_tensor_names(const std::string& weight_name);
Result<Host4bitWeight> unpack_nf4(const ShapeCheck& check, const std::string& weight_name,
                                  int64_t n, int64_t k, int64_t g);

}  // namespace ib::detail
