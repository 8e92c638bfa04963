// The vision encoder's elementwise and row kernels (VisionOps): LayerNorm with a bias (a block
// per row, the row staged in shared memory as fp32, mean and variance in two passes), the
// residual add and quick_gelu / erf gelu (16 bytes per access where aligned), and the
// rotate-half rotary embedding with per-row angles. All read act (f32/bf16/f16), compute in fp32
// and round once.
#include <algorithm>
#include <cmath>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/vision_kernels.h"

namespace ib::cuda {
namespace {

constexpr int kNormThreads = 256;
constexpr int kElementThreads = 256;

// grid (T); dynamic shared memory d floats (the row) plus 32 for the reductions.
template <typename T>
__global__ void __launch_bounds__(kNormThreads)
    layer_norm_kernel(const T* x, const T* weight, const T* bias, float eps, int d, T* out) {
  extern __shared__ float row_s[];  // (d) the row, then 32 floats of reduction scratch
  float* scratch = row_s + d;
  const int64_t r = blockIdx.x;
  const T* in = x + r * d;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = to_f32(in[i]);
    row_s[i] = v;
    sum += v;
  }
  const float mean = block_sum(sum, scratch) / static_cast<float>(d);
  float sq = 0.0f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float c = row_s[i] - mean;
    sq += c * c;
  }
  const float inv = rsqrtf(block_sum(sq, scratch) / static_cast<float>(d) + eps);
  T* o = out + r * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    o[i] = from_f32<T>((row_s[i] - mean) * inv * to_f32(weight[i]) + to_f32(bias[i]));
  }
}

// VEC: elements per thread per step, kVec16<T> with 16-byte aligned x and y and n a multiple of
// it (one 16-byte access each), else 1.
template <typename T, int VEC>
__global__ void add_kernel(T* x, const T* y, int64_t n) {
  for (int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * VEC; i < n;
       i += int64_t{gridDim.x} * blockDim.x * VEC) {
    if constexpr (VEC == 1) {
      x[i] = from_f32<T>(to_f32(x[i]) + to_f32(y[i]));
    } else {
      float a[VEC], b[VEC];
      load16_f32(x + i, a);
      load16_f32(y + i, b);
#pragma unroll
      for (int j = 0; j < VEC; ++j) a[j] += b[j];
      store16_f32(x + i, a);
    }
  }
}

__device__ __forceinline__ float vision_act(float v, bool quick_gelu) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  return quick_gelu ? v / (1.0f + expf(-1.702f * v)) : 0.5f * v * (1.0f + erff(v * kInvSqrt2));
}

template <typename T, int VEC>
__global__ void activation_kernel(T* x, int64_t n, bool quick_gelu) {
  for (int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * VEC; i < n;
       i += int64_t{gridDim.x} * blockDim.x * VEC) {
    if constexpr (VEC == 1) {
      x[i] = from_f32<T>(vision_act(to_f32(x[i]), quick_gelu));
    } else {
      float a[VEC];
      load16_f32(x + i, a);
#pragma unroll
      for (int j = 0; j < VEC; ++j) a[j] = vision_act(a[j], quick_gelu);
      store16_f32(x + i, a);
    }
  }
}

// grid (T, ceil(2 H half / threads)); one thread per rotated pair of a q or k head.
template <typename T>
__global__ void rotary_rows_kernel(T* qkv, const float* cos, const float* sin, int num_heads,
                                   int head_dim) {
  const int half = head_dim / 2;
  const int i = blockIdx.y * blockDim.x + threadIdx.x;
  if (i >= 2 * num_heads * half) return;
  const int64_t t = blockIdx.x;
  const int head = i / half;
  const int j = i % half;
  T* h = qkv + t * 3 * int64_t{num_heads} * head_dim + int64_t{head} * head_dim;
  const float c = cos[t * half + j];
  const float s = sin[t * half + j];
  const float x1 = to_f32(h[j]);
  const float x2 = to_f32(h[j + half]);
  h[j] = from_f32<T>(x1 * c - x2 * s);
  h[j + half] = from_f32<T>(x2 * c + x1 * s);
}

// One thread per pixel: pixel (image, c, y, x) of pixels (N 3 S, S) to its place in the patch
// rows (N (S/p)^2, 3 p p); consecutive threads read consecutive pixels.
template <typename T>
__global__ void unfold_patches_kernel(const T* pixels, int64_t total, int s, int p, T* out) {
  const int grid = s / p;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int x = static_cast<int>(i % s);
    const int64_t r = i / s;  // (image, c, y)
    const int y = static_cast<int>(r % s);
    const int c = static_cast<int>(r / s % 3);
    const int64_t image = r / (3 * int64_t{s});
    const int64_t row = (image * grid + y / p) * grid + x / p;
    out[row * 3 * p * p + (c * p + y % p) * p + x % p] = pixels[i];
  }
}

unsigned element_blocks(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kElementThreads - 1) / kElementThreads,
                                                   int64_t{1}, int64_t{1} << 16));
}

}  // namespace

void launch_layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                       Tensor out, cudaStream_t stream) {
  const int64_t d = x.row_size();
  IB_ASSERT(d >= 1 && d <= kLayerNormMaxDim, "layer_norm: rows of at most 12288 elements");
  const auto smem = static_cast<size_t>(d + 32) * sizeof(float);
  IB_DISPATCH_FLOAT(x.dtype, T, {
    IB_CUDA_CHECK(
        cudaFuncSetAttribute(layer_norm_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem)),
        "layer_norm");
    layer_norm_kernel<T><<<static_cast<unsigned>(x.rows()), kNormThreads, smem, stream>>>(
        x.as<const T>(), weight.as<const T>(), bias.as<const T>(), eps, static_cast<int>(d),
        out.as<T>());
  });
  IB_CUDA_CHECK_LAUNCH("layer_norm");
}

void launch_add(Tensor x, const Tensor& y, cudaStream_t stream) {
  const int64_t n = x.numel();
  IB_DISPATCH_FLOAT(x.dtype, T, {
    constexpr int kVec = kVec16<T>;
    if (aligned16(x.data) && aligned16(y.data) && n % kVec == 0) {
      add_kernel<T, kVec>
          <<<element_blocks(n / kVec), kElementThreads, 0, stream>>>(x.as<T>(), y.as<const T>(), n);
    } else {
      add_kernel<T, 1>
          <<<element_blocks(n), kElementThreads, 0, stream>>>(x.as<T>(), y.as<const T>(), n);
    }
  });
  IB_CUDA_CHECK_LAUNCH("add");
}

void launch_vision_activation(Tensor x, VisionActivation act, cudaStream_t stream) {
  const int64_t n = x.numel();
  const bool quick = act == VisionActivation::kQuickGelu;
  IB_DISPATCH_FLOAT(x.dtype, T, {
    constexpr int kVec = kVec16<T>;
    if (aligned16(x.data) && n % kVec == 0) {
      activation_kernel<T, kVec>
          <<<element_blocks(n / kVec), kElementThreads, 0, stream>>>(x.as<T>(), n, quick);
    } else {
      activation_kernel<T, 1>
          <<<element_blocks(n), kElementThreads, 0, stream>>>(x.as<T>(), n, quick);
    }
  });
  IB_CUDA_CHECK_LAUNCH("activation");
}

void launch_rotary_rows(Tensor qkv, const Tensor& cos, const Tensor& sin, int num_heads,
                        cudaStream_t stream) {
  const int64_t t = qkv.rows();
  const auto head_dim = static_cast<int>(qkv.row_size() / (3 * num_heads));
  const int items = num_heads * head_dim;  // 2 H pairs of hd / 2
  const dim3 grid(static_cast<unsigned>(t),
                  static_cast<unsigned>((items + kElementThreads - 1) / kElementThreads));
  IB_DISPATCH_FLOAT(qkv.dtype, T, {
    rotary_rows_kernel<T><<<grid, kElementThreads, 0, stream>>>(
        qkv.as<T>(), cos.as<const float>(), sin.as<const float>(), num_heads, head_dim);
  });
  IB_CUDA_CHECK_LAUNCH("rotary_rows");
}

void launch_unfold_patches(const Tensor& pixels, int64_t patch, Tensor out, cudaStream_t stream) {
  const int64_t n = pixels.numel();
  const auto s = static_cast<int>(pixels.row_size());
  IB_DISPATCH_FLOAT(pixels.dtype, T, {
    unfold_patches_kernel<T><<<element_blocks(n), kElementThreads, 0, stream>>>(
        pixels.as<const T>(), n, s, static_cast<int>(patch), out.as<T>());
  });
  IB_CUDA_CHECK_LAUNCH("unfold_patches");
}

}  // namespace ib::cuda
