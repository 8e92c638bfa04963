// Checked reads of a 4-bit checkpoint's tensors (detail/int4_unpack.h).
#include <cstring>

#include "engine/detail/int4_unpack.h"

namespace ib::detail {

int32_t i32_at(const HostTensorRef& t, int64_t i) {
  int32_t v;
  std::memcpy(&v, static_cast<const char*>(t.data) + i * 4, 4);
  return v;
}

float f32_at(const HostTensorRef& t, int64_t i) {
  if (t.dtype == DType::kF32) {
    float v;
    std::memcpy(&v, static_cast<const char*>(t.data) + i * 4, 4);
    return v;
  }
  uint16_t b;
  std::memcpy(&b, static_cast<const char*>(t.data) + i * 2, 2);
  return t.dtype == DType::kBF16 ? bf16_bits_to_f32(b) : f16_bits_to_f32(b);
}

uint16_t f16_bits_at(const HostTensorRef& t, int64_t i) {
  if (t.dtype != DType::kF16) return f32_to_f16_bits(f32_at(t, i));
  uint16_t b;
  std::memcpy(&b, static_cast<const char*>(t.data) + i * 2, 2);
  return b;
}

std::string ShapeCheck::context() const {
  const std::string groups = g == k ? "one group per row" : "groups of " + std::to_string(g);
  return "config.json's " + q.format + " quantization (" + q.packing + ", 4-bit, " + groups +
         ") of a (" + std::to_string(n) + ", " + std::to_string(k) + ") weight";
}

Status ShapeCheck::divisible(const std::string& weight_name) const {
  const bool packs_n = q.packing == "awq" || q.packing == "gptq" ||
                       (q.packing == "compressed-tensors" && q.zero_points);
  if (g > 0 && k % g == 0 && k % 8 == 0 && (!packs_n || n % 8 == 0)) return Ok{};
  return user_error("safetensors: '" + weight_name + "': " + context() +
                    " does not pack: K must be a multiple of the group size and of 8" +
                    (packs_n ? std::string(", and N of 8") : std::string()) +
                    "; config.json does not describe this checkpoint");
}

Result<HostTensorRef> ShapeCheck::get(const std::string& name, DType dtype,
                                      const std::vector<int64_t>& shape) const {
  IB_ASSIGN_OR_RETURN(HostTensorRef t, ckpt.get(name));
  if (t.dtype == dtype && t.shape == shape) return t;
  return user_error("safetensors: tensor '" + name + "' is " + std::string(dtype_name(t.dtype)) +
                    " " + shape_string(t.shape) + " but " + context() + " stores it as " +
                    std::string(dtype_name(dtype)) + " " + shape_string(shape) +
                    "; the files and config.json (bits, group_size) disagree");
}

Result<HostTensorRef> ShapeCheck::get_flat(const std::string& name, DType dtype,
                                           int64_t numel) const {
  IB_ASSIGN_OR_RETURN(HostTensorRef t, ckpt.get(name));
  if (t.dtype == dtype && t.numel() == numel) return t;
  return user_error("safetensors: tensor '" + name + "' is " + std::string(dtype_name(t.dtype)) +
                    " " + shape_string(t.shape) + " but " + context() + " stores " +
                    std::to_string(numel) + " elements of " + std::string(dtype_name(dtype)) +
                    " in it; the files and config.json disagree");
}

Result<HostTensorRef> ShapeCheck::get_float(const std::string& name,
                                            const std::vector<int64_t>& shape) const {
  IB_ASSIGN_OR_RETURN(HostTensorRef t, ckpt.get(name));
  const bool is_float = t.dtype == DType::kF16 || t.dtype == DType::kBF16 || t.dtype == DType::kF32;
  if (is_float && t.shape == shape) return t;
  return user_error("safetensors: tensor '" + name + "' is " + std::string(dtype_name(t.dtype)) +
                    " " + shape_string(t.shape) + " but " + context() +
                    " stores its scales as float16, bfloat16 or float32 " + shape_string(shape) +
                    "; the files and config.json (bits, group_size) disagree");
}

Status ShapeCheck::weight_shape(const std::string& name, int64_t rows, int64_t cols) const {
  IB_ASSIGN_OR_RETURN(HostTensorRef t, ckpt.get(name));
  if ((t.dtype == DType::kI64 || t.dtype == DType::kI32) && t.numel() == 2) {
    int64_t v[2];
    for (int i = 0; i < 2; ++i) {
      v[i] = t.dtype == DType::kI32 ? i32_at(t, i) : [&] {
        int64_t x;
        std::memcpy(&x, static_cast<const char*>(t.data) + i * 8, 8);
        return x;
      }();
    }
    if (v[0] == rows && v[1] == cols) return Ok{};
  }
  return user_error("safetensors: tensor '" + name + "' must hold the weight's shape [" +
                    std::to_string(rows) + ", " + std::to_string(cols) +
                    "] as two integers; it does not (the checkpoint and config.json disagree)");
}

}  // namespace ib::detail
