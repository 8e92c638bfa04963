// RMSNorm and the fused residual-add + RMSNorm: one block per row, fp32 sums, 16-byte vectors
// when the row allows. The residual is rounded to its dtype before the norm reads it, so the
// norm sees exactly the residual that is stored (as HF does in bf16).
//
// IB_NORM_REGS (set_norm_regs, default on): rows of up to 4 vectors per thread (8,192 bf16 values)
// in the register form: each thread's gain vectors loaded before the PDL wait (the gain is
// constant), its x (and residual sum) kept in registers between the sum of squares and the scaling,
// so x is read once instead of twice. The same arithmetic in the same order as the two-pass kernel.
//
// IB_NORM_POST (set_norm_post, default on): Gemma-2's post-norm, residual add and the next
// pre-norm in one kernel of the register form: x normalised (its own sum of squares, rounded to T
// as rms_norm stores it) and kept in registers, then added to the residual and normalised as
// add_rms_norm does. The two kernels' arithmetic in their order: bit for bit in bf16/fp16; fp32 may
// differ in the last bit where the compiler fuses the product with the add.
#include <atomic>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/flag_sync.cuh"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/pdl.cuh"
#include "backend/cuda/detail/quant_switches.h"

namespace ib::cuda {
namespace {

constexpr int kThreads = 256;

// One 16-byte vector of the row at column c into v: x, or with a residual the sum rounded to T
// and stored back into it; adds its squares to sum_sq.
template <typename T>
__device__ __forceinline__ void load_norm_input(const T* xr, T* rr, int64_t c,
                                                float (&v)[kVec16<T>], float& sum_sq) {
  load16_f32(xr + c, v);
  if (rr) {
    float r[kVec16<T>];
    load16_f32(rr + c, r);
#pragma unroll
    for (int i = 0; i < kVec16<T>; ++i) v[i] = to_f32(from_f32<T>(r[i] + v[i]));
    store16_f32(rr + c, v);
  }
#pragma unroll
  for (int i = 0; i < kVec16<T>; ++i) sum_sq += v[i] * v[i];
}

// Where a norm kernel before a quantized GEMV lets it launch (IB_QUANT_SYNC, kernels.h's
// launch_rms_norm): sync null, or trigger_first 0, right after the wait; else before it.
__device__ __forceinline__ void norm_wait(const unsigned* sync, int trigger_first) {
  if (sync != nullptr && trigger_first) pdl_trigger();
  pdl_wait();
  if (sync == nullptr || !trigger_first) pdl_trigger();
}

// x (rows, d); residual (rows, d) or null; weight (d); out (rows, d). sync (null: none): the
// block counts itself into sync[0] once its row is stored (GemvQuant::sync).
template <typename T, bool kVector>
__global__ void __launch_bounds__(kThreads)
    rms_norm_kernel(T* residual, const T* x, const T* weight, float eps, T* out, int64_t d,
                    const T* /*x_weight: the register form's (IB_NORM_POST)*/, unsigned* sync,
                    int trigger_first) {
  __shared__ float scratch[32];
  norm_wait(sync, trigger_first);
  const int64_t row = blockIdx.x;
  const T* xr = x + row * d;
  T* rr = residual ? residual + row * d : nullptr;
  T* outr = out + row * d;
  float sum_sq = 0.0f;
  if constexpr (kVector) {
    constexpr int kV = kVec16<T>;
    for (int64_t c = int64_t{threadIdx.x} * kV; c < d; c += int64_t{kThreads} * kV) {
      float v[kV];
      load_norm_input(xr, rr, c, v, sum_sq);
    }
  } else {
    for (int64_t c = threadIdx.x; c < d; c += kThreads) {
      float v = to_f32(xr[c]);
      if (rr) {
        const T s = from_f32<T>(to_f32(rr[c]) + v);
        rr[c] = s;
        v = to_f32(s);
      }
      sum_sq += v * v;
    }
  }
  const float total = block_sum(sum_sq, scratch);
  const float inv_rms = rsqrtf(total / static_cast<float>(d) + eps);
  const T* src = rr ? rr : xr;
  if constexpr (kVector) {
    constexpr int kV = kVec16<T>;
    for (int64_t c = int64_t{threadIdx.x} * kV; c < d; c += int64_t{kThreads} * kV) {
      float v[kV], w[kV];
      load16_f32(src + c, v);
      load16_f32(weight + c, w);
#pragma unroll
      for (int i = 0; i < kV; ++i) v[i] = v[i] * inv_rms * w[i];
      store16_f32(outr + c, v);
    }
  } else {
    for (int64_t c = threadIdx.x; c < d; c += kThreads)
      outr[c] = from_f32<T>(to_f32(src[c]) * inv_rms * to_f32(weight[c]));
  }
  if (sync != nullptr) block_count_done(sync);
}

// The register form (IB_NORM_REGS): d % kVec16<T> == 0, d <= kThreads * kVec16<T> * kPer. With
// kNormX (IB_NORM_POST), x is first replaced by rms_norm(x) * x_weight rounded to T; residual is
// then required.
template <typename T, int kPer, bool kNormX = false>
__global__ void __launch_bounds__(kThreads)
    rms_norm_regs_kernel(T* residual, const T* x, const T* weight, float eps, T* out, int64_t d,
                         const T* x_weight, unsigned* sync, int trigger_first) {
  constexpr int kV = kVec16<T>;
  __shared__ float scratch[32];
  float v[kPer][kV], w[kPer][kV];
  const auto column = [](int i) { return (int64_t{threadIdx.x} + int64_t{i} * kThreads) * kV; };
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    if (column(i) < d) load16_f32(weight + column(i), w[i]);
  float xw[kNormX ? kPer : 1][kV];
  if constexpr (kNormX) {
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (column(i) < d) load16_f32(x_weight + column(i), xw[i]);
  }
  norm_wait(sync, trigger_first);
  const int64_t row = blockIdx.x;
  const T* xr = x + row * d;
  T* rr = residual ? residual + row * d : nullptr;
  float sum_sq = 0.0f;
  if constexpr (kNormX) {
    // rms_norm(x) * x_weight as the kernel stores it (rounded to T), in registers.
    float x_sq = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (column(i) >= d) continue;
      load16_f32(xr + column(i), v[i]);
#pragma unroll
      for (int j = 0; j < kV; ++j) x_sq += v[i][j] * v[i][j];
    }
    const float x_inv_rms = rsqrtf(block_sum(x_sq, scratch) / static_cast<float>(d) + eps);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (column(i) >= d) continue;
      float r[kV];
      load16_f32(rr + column(i), r);
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        const float xn = to_f32(from_f32<T>(v[i][j] * x_inv_rms * xw[i][j]));
        v[i][j] = to_f32(from_f32<T>(r[j] + xn));  // the residual add, as load_norm_input
        sum_sq += v[i][j] * v[i][j];
      }
      store16_f32(rr + column(i), v[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (column(i) < d) load_norm_input(xr, rr, column(i), v[i], sum_sq);
  }
  const float total = block_sum(sum_sq, scratch);
  const float inv_rms = rsqrtf(total / static_cast<float>(d) + eps);
  T* outr = out + row * d;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    if (column(i) >= d) continue;
#pragma unroll
    for (int j = 0; j < kV; ++j) v[i][j] = v[i][j] * inv_rms * w[i][j];
    store16_f32(outr + column(i), v[i]);
  }
  if (sync != nullptr) block_count_done(sync);
}

std::atomic<bool> g_norm_regs{true};  // IB_NORM_REGS
std::atomic<bool> g_norm_post{true};  // IB_NORM_POST

}  // namespace

void set_norm_regs(bool on) {
  g_norm_regs.store(on, std::memory_order_relaxed);
}

bool norm_regs() {
  return g_norm_regs.load(std::memory_order_relaxed);
}

void set_norm_post(bool on) {
  g_norm_post.store(on, std::memory_order_relaxed);
}

bool norm_post() {
  return g_norm_post.load(std::memory_order_relaxed);
}

bool launch_rms_norm(Tensor* residual, const Tensor& x, const Tensor& weight, float eps, Tensor out,
                     cudaStream_t stream, bool pdl, unsigned* sync) {
  const int64_t rows = x.rows();
  const int64_t d = x.row_size();
  if (rows == 0) return false;
  const int sync_mode = sync != nullptr ? quant_sync() : 0;
  if (sync_mode == 0) sync = nullptr;
  IB_DISPATCH_FLOAT(x.dtype, T, {
    T* res = residual ? residual->as<T>() : nullptr;
    const bool vector = d % kVec16<T> == 0 && aligned16(x.data) && aligned16(weight.data) &&
                        aligned16(out.data) && (res == nullptr || aligned16(res));
    const char* op = residual ? "add_rms_norm" : "rms_norm";
    auto kernel = vector ? rms_norm_kernel<T, true> : rms_norm_kernel<T, false>;
    const int64_t per = (d + int64_t{kThreads} * kVec16<T> - 1) / (int64_t{kThreads} * kVec16<T>);
    if (vector && norm_regs() && per <= 4) {
      kernel = per == 1 ? rms_norm_regs_kernel<T, 1>
                        : (per == 2 ? rms_norm_regs_kernel<T, 2> : rms_norm_regs_kernel<T, 4>);
    }
    launch_kernel(op, pdl, kernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0, stream,
                  res, x.as<T>(), weight.as<T>(), eps, out.as<T>(), d,
                  static_cast<const T*>(nullptr), sync, sync_mode == 2 ? 1 : 0);
  });
  return sync != nullptr;
}

bool launch_norm_add_rms_norm(Tensor residual, const Tensor& x, const Tensor& x_weight,
                              const Tensor& weight, float eps, Tensor out, cudaStream_t stream,
                              bool pdl) {
  const int64_t rows = x.rows();
  const int64_t d = x.row_size();
  if (!norm_post() || !norm_regs()) return false;
  if (rows == 0) return true;
  bool launched = false;
  IB_DISPATCH_FLOAT(x.dtype, T, {
    const int64_t per = (d + int64_t{kThreads} * kVec16<T> - 1) / (int64_t{kThreads} * kVec16<T>);
    const bool vector = d % kVec16<T> == 0 && aligned16(x.data) && aligned16(x_weight.data) &&
                        aligned16(weight.data) && aligned16(out.data) && aligned16(residual.data);
    if (vector && per <= 4) {
      auto kernel = per == 1   ? rms_norm_regs_kernel<T, 1, true>
                    : per == 2 ? rms_norm_regs_kernel<T, 2, true>
                               : rms_norm_regs_kernel<T, 4, true>;
      launch_kernel("norm_add_rms_norm", pdl, kernel, dim3(static_cast<unsigned>(rows)),
                    dim3(kThreads), 0, stream, residual.as<T>(), x.as<const T>(), weight.as<T>(),
                    eps, out.as<T>(), d, x_weight.as<const T>(), static_cast<unsigned*>(nullptr),
                    0);
      launched = true;
    }
  });
  return launched;
}

}  // namespace ib::cuda
