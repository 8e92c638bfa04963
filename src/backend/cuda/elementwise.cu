// Elementwise kernels: seeded uniform fill (bit-identical to the CPU before rounding), constant
// fill, dtype conversion, SwiGLU, GeGLU (tanh gelu), affine and tanh soft-cap maps, row gather
// (embedding, last-token selection) and bias add.
#include <algorithm>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/pdl.cuh"
#include "core/rng.h"

namespace ib::cuda {
namespace {

constexpr int kThreads = 256;

int grid_for(int64_t n, int64_t per_block) {
  const int64_t blocks = (n + per_block - 1) / per_block;
  return static_cast<int>(std::clamp<int64_t>(blocks, 1, 65535LL * 16));
}

template <typename T>
__global__ void fill_uniform_kernel(T* dst, int64_t n, uint64_t seed, uint64_t stream_id,
                                    float scale) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kThreads) {
    const float u = counter_uniform(seed, stream_id, static_cast<uint64_t>(i));
    // The same two roundings as the CPU: (2u - 1) is exact, then one multiply; no contraction.
    const float v = __fmul_rn(scale, __fsub_rn(__fmul_rn(2.0f, u), 1.0f));
    dst[i] = from_f32<T>(v);
  }
}

template <typename T>
__global__ void fill_constant_kernel(T* dst, int64_t n, float value) {
  const T v = from_f32<T>(value);
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kThreads)
    dst[i] = v;
}

template <typename S, typename D>
__global__ void convert_kernel(const S* src, D* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kThreads)
    dst[i] = from_f32<D>(to_f32(src[i]));
}

// gate_up (T, 2F) -> out (T, F); one 16-byte vector per thread (F % kVec16 == 0).
template <typename T>
__global__ void silu_mul_vec_kernel(const T* gate_up, T* out, int64_t tokens, int64_t f) {
  pdl_wait();
  pdl_trigger();
  constexpr int kV = kVec16<T>;
  const int64_t vecs_per_row = f / kV;
  const int64_t total = tokens * vecs_per_row;
  for (int64_t v = blockIdx.x * int64_t{kThreads} + threadIdx.x; v < total;
       v += int64_t{gridDim.x} * kThreads) {
    const int64_t t = v / vecs_per_row;
    const int64_t c = (v % vecs_per_row) * kV;
    float g[kV], u[kV], o[kV];
    load16_f32(gate_up + t * 2 * f + c, g);
    load16_f32(gate_up + t * 2 * f + f + c, u);
#pragma unroll
    for (int i = 0; i < kV; ++i) o[i] = silu(g[i]) * u[i];
    store16_f32(out + t * f + c, o);
  }
}

template <typename T>
__global__ void silu_mul_scalar_kernel(const T* gate_up, T* out, int64_t tokens, int64_t f) {
  pdl_wait();
  pdl_trigger();
  const int64_t total = tokens * f;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * kThreads) {
    const int64_t t = i / f;
    const int64_t c = i % f;
    out[i] = from_f32<T>(silu(to_f32(gate_up[t * 2 * f + c])) * to_f32(gate_up[t * 2 * f + f + c]));
  }
}

// GeGLU with PyTorch's tanh gelu: gate_up (T, 2F) -> out (T, F).
template <typename T>
__global__ void gelu_tanh_mul_kernel(const T* gate_up, T* out, int64_t tokens, int64_t f) {
  const int64_t total = tokens * f;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * kThreads) {
    const int64_t t = i / f;
    const int64_t c = i % f;
    const float x = to_f32(gate_up[t * 2 * f + c]);
    const float g = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    out[i] = from_f32<T>(g * to_f32(gate_up[t * 2 * f + f + c]));
  }
}

// x = x * mul + add (cap == 0), or x = cap * tanh(x / cap) (cap > 0), in place.
template <typename T>
__global__ void affine_softcap_kernel(T* x, int64_t n, float mul, float add, float cap) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kThreads) {
    const float v = to_f32(x[i]);
    x[i] = from_f32<T>(cap > 0.0f ? cap * tanhf(v / cap) : v * mul + add);
  }
}

// One block per output row; W is the copy unit (uint4, uint32_t, uint16_t or uint8_t).
template <typename W>
__global__ void gather_rows_kernel(const W* x, int64_t num_x_rows, const int32_t* row_ids, W* out,
                                   int64_t units_per_row) {
  pdl_wait();
  pdl_trigger();
  const int64_t r = blockIdx.x;
  const int32_t id = row_ids[r];
  W* dst = out + r * units_per_row;
  if (id < 0 || id >= num_x_rows) {
    for (int64_t i = threadIdx.x; i < units_per_row; i += blockDim.x) dst[i] = W{};
    return;
  }
  const W* src = x + int64_t{id} * units_per_row;
  for (int64_t i = threadIdx.x; i < units_per_row; i += blockDim.x) dst[i] = src[i];
}

template <typename T, typename B>
__global__ void bias_add_kernel(T* out, const B* bias, int64_t m, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < m * n;
       i += int64_t{gridDim.x} * kThreads)
    out[i] = from_f32<T>(to_f32(out[i]) + to_f32(bias[i % n]));
}

// 16 bytes per thread per iteration, grid-stride: the simplest copy that reaches the copy ceiling.
__global__ void __launch_bounds__(512) copy16_kernel(const uint4* src, uint4* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{512} + threadIdx.x; i < n; i += size_t{gridDim.x} * 512)
    dst[i] = src[i];
}

// w (n, k) columns *= gain (k); gain in w's dtype.
template <typename T>
__global__ void scale_columns_kernel(T* w, const T* gain, int64_t n, int64_t k) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n * k;
       i += int64_t{gridDim.x} * kThreads)
    w[i] = from_f32<T>(to_f32(w[i]) * to_f32(gain[i % k]));
}

}  // namespace

void launch_copy16(const void* src, void* dst, size_t bytes, int num_sms, cudaStream_t stream) {
  const size_t n = bytes / 16;
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>(num_sms * 4);
  copy16_kernel<<<blocks, 512, 0, stream>>>(static_cast<const uint4*>(src),
                                            static_cast<uint4*>(dst), n);
  IB_CUDA_CHECK_LAUNCH("copy");
}

void launch_fill_uniform(Tensor dst, uint64_t seed, uint64_t stream_id, float scale,
                         cudaStream_t stream) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  IB_DISPATCH_FLOAT(dst.dtype, T,
                    fill_uniform_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
                        dst.as<T>(), n, seed, stream_id, scale));
  IB_CUDA_CHECK_LAUNCH("fill_uniform");
}

void launch_fill_constant(Tensor dst, float value, cudaStream_t stream) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  IB_DISPATCH_FLOAT(dst.dtype, T,
                    fill_constant_kernel<T>
                    <<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst.as<T>(), n, value));
  IB_CUDA_CHECK_LAUNCH("fill_constant");
}

void launch_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                    cudaStream_t stream) {
  if (n == 0) return;
  IB_DISPATCH_FLOAT(
      src_dtype, S,
      IB_DISPATCH_FLOAT(dst_dtype, D,
                        convert_kernel<S, D><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
                            static_cast<const S*>(src), static_cast<D*>(dst), n)));
  IB_CUDA_CHECK_LAUNCH("copy_from_host");
}

void launch_silu_mul(const Tensor& gate_up, Tensor out, cudaStream_t stream, bool pdl) {
  const int64_t tokens = out.rows();
  const int64_t f = out.row_size();
  if (tokens == 0) return;
  IB_DISPATCH_FLOAT(out.dtype, T, {
    if (f % kVec16<T> == 0 && aligned16(gate_up.data) && aligned16(out.data)) {
      launch_kernel("silu_mul", pdl, silu_mul_vec_kernel<T>,
                    dim3(static_cast<unsigned>(grid_for(tokens * f / kVec16<T>, kThreads))),
                    dim3(kThreads), 0, stream, gate_up.as<T>(), out.as<T>(), tokens, f);
    } else {
      launch_kernel("silu_mul", pdl, silu_mul_scalar_kernel<T>,
                    dim3(static_cast<unsigned>(grid_for(tokens * f, kThreads))), dim3(kThreads), 0,
                    stream, gate_up.as<T>(), out.as<T>(), tokens, f);
    }
  });
}

void launch_gelu_tanh_mul(const Tensor& gate_up, Tensor out, cudaStream_t stream) {
  const int64_t tokens = out.rows();
  const int64_t f = out.row_size();
  if (tokens == 0) return;
  IB_DISPATCH_FLOAT(out.dtype, T,
                    gelu_tanh_mul_kernel<T>
                    <<<grid_for(tokens * f, kThreads), kThreads, 0, stream>>>(
                        gate_up.as<T>(), out.as<T>(), tokens, f));
  IB_CUDA_CHECK_LAUNCH("gelu_tanh_mul");
}

void launch_affine_softcap(Tensor x, float mul, float add, float cap, cudaStream_t stream) {
  const int64_t n = x.numel();
  if (n == 0) return;
  IB_DISPATCH_FLOAT(x.dtype, T,
                    affine_softcap_kernel<T>
                    <<<grid_for(n, kThreads), kThreads, 0, stream>>>(x.as<T>(), n, mul, add, cap));
  IB_CUDA_CHECK_LAUNCH(cap > 0.0f ? "softcap" : "affine");
}

void launch_gather_rows(const Tensor& x, const Tensor& row_ids, Tensor out, cudaStream_t stream,
                        bool pdl) {
  const int64_t rows = out.dim(0);
  if (rows == 0) return;
  const size_t row_bytes = static_cast<size_t>(x.row_size()) * dtype_size(x.dtype);
  const auto both_aligned = [&](size_t a) {
    return row_bytes % a == 0 && reinterpret_cast<uintptr_t>(x.data) % a == 0 &&
           reinterpret_cast<uintptr_t>(out.data) % a == 0;
  };
  const int64_t num_x_rows = x.dim(0);
  const auto* ids = row_ids.as<int32_t>();
  const auto launch = [&](auto unit) {
    using W = decltype(unit);
    const auto units = static_cast<int64_t>(row_bytes / sizeof(W));
    const int threads = static_cast<int>(std::clamp<int64_t>((units + 31) / 32 * 32, 32, 256));
    launch_kernel("gather_rows", pdl, gather_rows_kernel<W>, dim3(static_cast<unsigned>(rows)),
                  dim3(static_cast<unsigned>(threads)), 0, stream, static_cast<const W*>(x.data),
                  num_x_rows, ids, static_cast<W*>(out.data), units);
  };
  if (both_aligned(16)) {
    launch(uint4{});
  } else if (both_aligned(4)) {
    launch(uint32_t{});
  } else if (both_aligned(2)) {
    launch(uint16_t{});
  } else {
    launch(uint8_t{});
  }
}

void launch_bias_add(Tensor out, const Tensor& bias, cudaStream_t stream) {
  const int64_t m = out.rows();
  const int64_t n = out.row_size();
  if (m == 0) return;
  IB_DISPATCH_FLOAT(
      out.dtype, T,
      IB_DISPATCH_FLOAT(bias.dtype, B,
                        bias_add_kernel<T, B><<<grid_for(m * n, kThreads), kThreads, 0, stream>>>(
                            out.as<T>(), bias.as<B>(), m, n)));
  IB_CUDA_CHECK_LAUNCH("matmul(bias)");
}

void launch_scale_columns(Tensor w, const Tensor& gain, cudaStream_t stream) {
  const int64_t n = w.rows();
  const int64_t k = w.row_size();
  if (n == 0) return;
  IB_DISPATCH_FLOAT(w.dtype, T,
                    scale_columns_kernel<T><<<grid_for(n * k, kThreads), kThreads, 0, stream>>>(
                        w.as<T>(), gain.as<T>(), n, k));
  IB_CUDA_CHECK_LAUNCH("scale_columns");
}

}  // namespace ib::cuda
