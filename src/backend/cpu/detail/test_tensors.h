// Test support: tensors in a backend's memory filled from host vectors, kept alive by an arena.
// Header-only; used by the CPU backend's tests and available to other backends' differential tests.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"

namespace ib::testing {

class TensorArena {
 public:
  explicit TensorArena(Backend& backend) : backend_(backend) {}

  Tensor empty(DType dtype, std::initializer_list<int64_t> shape) {
    Tensor probe(nullptr, dtype, shape);
    auto buf = backend_.alloc(probe.bytes(), MemoryTag::kOther);
    IB_ASSERT(buf.ok(), "test allocation failed");
    buffers_.push_back(std::move(buf).value());
    return buffers_.back().view(dtype, shape);
  }
  Tensor f32(std::initializer_list<int64_t> shape, const std::vector<float>& values) {
    Tensor t = empty(DType::kF32, shape);
    IB_ASSERT(static_cast<int64_t>(values.size()) == t.numel(), "value count != shape");
    backend_.copy_from_host(t, values.data(), DType::kF32);
    return t;
  }
  Tensor i32(std::initializer_list<int64_t> shape, const std::vector<int32_t>& values) {
    Tensor t = empty(DType::kI32, shape);
    IB_ASSERT(static_cast<int64_t>(values.size()) == t.numel(), "value count != shape");
    backend_.copy_from_host(t, values.data(), DType::kI32);
    return t;
  }
  Tensor i64(std::initializer_list<int64_t> shape, const std::vector<int64_t>& values) {
    Tensor t = empty(DType::kI64, shape);
    IB_ASSERT(static_cast<int64_t>(values.size()) == t.numel(), "value count != shape");
    backend_.copy_from_host(t, values.data(), DType::kI64);
    return t;
  }
  // fp8_e4m3 bytes as they are (no conversion).
  Tensor fp8(std::initializer_list<int64_t> shape, const std::vector<uint8_t>& bytes) {
    Tensor t = empty(DType::kF8E4M3, shape);
    IB_ASSERT(static_cast<int64_t>(bytes.size()) == t.numel(), "value count != shape");
    backend_.copy_from_host(t, bytes.data(), DType::kF8E4M3);
    return t;
  }
  std::vector<uint8_t> to_host_bytes(const Tensor& t) {
    IB_ASSERT(dtype_size(t.dtype) == 1, "to_host_bytes: one-byte dtypes only");
    std::vector<uint8_t> out(static_cast<size_t>(t.numel()));
    backend_.copy_to_host(t, out.data());
    return out;
  }
  std::vector<float> to_host(const Tensor& t) {
    IB_ASSERT(t.dtype == DType::kF32, "to_host: fp32 only");
    std::vector<float> out(static_cast<size_t>(t.numel()));
    backend_.copy_to_host(t, out.data());
    return out;
  }
  // A quantized weight's (N, K) codes and (N) scales, uninitialised (quantize_weight fills them).
  WeightRef quantized_weight(WeightFormat format, int64_t n, int64_t k) {
    WeightRef w;
    w.format = format;
    w.data = empty(quantized_data_dtype(format), {n, k});
    w.scales = empty(DType::kF32, {n});
    return w;
  }
  // A 4-bit weight (kInt4W4A16 or kNf4, backend/weight.h) of (N, K) in groups of group_size,
  // uninitialised: data (N, K / 2) u8, scales (N, K / G) (f16 or f32), zeros (N, K / G) u8.
  WeightRef four_bit_weight(WeightFormat format, int64_t n, int64_t k, int group_size,
                            bool asymmetric = false) {
    WeightRef w;
    w.format = format;
    w.group_size = group_size;
    w.asymmetric = asymmetric;
    w.data = empty(DType::kU8, {n, k / 2});
    const int64_t groups = k / group_size;
    w.scales = empty(format == WeightFormat::kNf4 ? DType::kF32 : DType::kF16, {n, groups});
    if (format == WeightFormat::kInt4W4A16) w.zeros = empty(DType::kU8, {n, groups});
    return w;
  }
  std::vector<int32_t> to_host_i32(const Tensor& t) {
    IB_ASSERT(t.dtype == DType::kI32, "to_host_i32: int32 only");
    std::vector<int32_t> out(static_cast<size_t>(t.numel()));
    backend_.copy_to_host(t, out.data());
    return out;
  }

 private:
  Backend& backend_;
  std::vector<Buffer> buffers_;
};

// A quantized weight as the host sees it: codes (uint8_t for E4M3 bits, int8_t) and scales.
template <typename TCode>
struct HostQuantized {
  std::vector<TCode> data;
  std::vector<float> scales;
};
template <typename TCode>
HostQuantized<TCode> quantized_to_host(Backend& backend, const WeightRef& w) {
  HostQuantized<TCode> h;
  h.data.resize(static_cast<size_t>(w.data.numel()));
  h.scales.resize(static_cast<size_t>(w.scales.numel()));
  backend.copy_to_host(w.data, h.data.data());
  backend.copy_to_host(w.scales, h.scales.data());
  return h;
}

// n values uniform in [lo, hi).
inline std::vector<float> random_floats(Rng& rng, int64_t n, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = lo + (hi - lo) * static_cast<float>(rng.uniform());
  return v;
}

}  // namespace ib::testing
