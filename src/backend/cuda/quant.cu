// Quantization per row (weights at load, activations before a GEMV or GEMM), as
// backend/weight.h defines it. FP8 E4M3: scale = max|row| / 448 (1 for a zero row),
// q = e4m3(v * (448 / max|row|)) rounded to nearest even with saturation (cvt.rn.satfinite, the
// CPU's f32_to_f8e4m3_bits). INT8: scale = max|row| / 127, q = clamp(rne(v * (127 / max|row|)),
// -127, 127) (the CPU's quantize_int8).
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/flag_sync.cuh"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/pdl.cuh"
#include "backend/cuda/detail/quant_row.cuh"
#include "backend/cuda/detail/quant_switches.h"

namespace ib::cuda {
namespace {

constexpr int kThreads = 256;

// IB_QUANT_TRIGGER (detail/quant_switches.h): where the vectorised quantize kernel triggers its
// successor (quantize_rows_vec_kernel's trigger). On an H100 at batch 1 its one block advanced
// an fp8 step by 4-7 us where ~2 us of work is, while the next GEMV's blocks, launched at its
// trigger, issued their first weight loads (bench/NOTES.md, "Batch 1 in the 8-bit and 4-bit
// formats"). 0 (the default): right after the wait; measured there (session 40, x-shared/run4)
// 1 and 2 lost 1.7 % and 3.8 % of fp8 batch 1: the next GEMV's early prefetch is worth more
// than the quantize block's own speed.
std::atomic<int> g_quant_trigger{0};
// IB_QUANT_SYNC (detail/quant_switches.h): 0 off, 1 flags, 2 flags with the trigger first.
std::atomic<int> g_quant_sync{0};

// One block per row: the row's max magnitude, then every element converted. kRms: the row is
// h of rms_norm(h) * gain: q = code(h * gain * kMax / max |h * gain|) and the scale
// max |h * gain| / kMax / rms(h), which is the quantization of rms_norm(h) * gain up to rounding.
// A static scale (fixed.scale > 0): q = static_code_of(h * gain / rms(h)), the scale fixed.scale.
template <typename T, typename TQ, bool kRms>
__global__ void __launch_bounds__(kThreads)
    quantize_rows_kernel(const T* __restrict__ src, const T* __restrict__ gain, float eps,
                         TQ* __restrict__ dst, float* __restrict__ scales, int64_t k,
                         StaticActQuant fixed) {
  __shared__ float scratch[32];
  const T* row = src + blockIdx.x * k;
  TQ* q = dst + blockIdx.x * k;
  pdl_wait();
  pdl_trigger();
  const auto value = [&](int64_t i) {
    return gain ? to_f32(row[i]) * to_f32(gain[i]) : to_f32(row[i]);
  };
  if (fixed.scale > 0.0f) {
    float inv_rms = 1.0f;
    if constexpr (kRms) {
      float ss = 0.0f;
      for (int64_t i = threadIdx.x; i < k; i += kThreads) ss += to_f32(row[i]) * to_f32(row[i]);
      inv_rms = rsqrtf(block_sum(ss, scratch) / static_cast<float>(k) + eps);
    }
    const float inv = 1.0f / fixed.scale;
    for (int64_t i = threadIdx.x; i < k; i += kThreads)
      q[i] = static_code_of<TQ>(value(i) * inv_rms, inv, fixed);
    if (threadIdx.x == 0) scales[blockIdx.x] = fixed.scale;
    return;
  }
  float amax = 0.0f, ss = 0.0f;
  for (int64_t i = threadIdx.x; i < k; i += kThreads) {
    amax = fmaxf(amax, fabsf(value(i)));
    if constexpr (kRms) ss += to_f32(row[i]) * to_f32(row[i]);
  }
  amax = block_max(amax, scratch);
  constexpr float kMax = QuantCode<TQ>::kMax;
  const float inv = amax == 0.0f ? 0.0f : kMax / amax;
  for (int64_t i = threadIdx.x; i < k; i += kThreads) q[i] = QuantCode<TQ>::of(value(i) * inv);
  float scale = amax == 0.0f ? 1.0f : amax / kMax;
  if constexpr (kRms) {
    ss = block_sum(ss, scratch);
    scale *= rsqrtf(ss / static_cast<float>(k) + eps);
  }
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
}

// quantize_rows_kernel for rows of 2-byte elements with k % 8 == 0 and k <= kThreads * 8 *
// kMaxVecs (Llama-3-8B's 4,096 and 14,336): each thread loads its 16-byte vectors of the row (and
// of gain) once, all before the first reduction, keeps them in registers, and writes its codes
// 8 bytes at a time; the same values, scales and codes as quantize_rows_kernel. (The loop kernel
// took 3.5-3.7 us per decode call and, with a static scale, 7.8-8.5 us: bench/NOTES.md.)
// trigger (IB_QUANT_TRIGGER): where the block lets the next kernel launch under programmatic
// dependent launch: 0 right after its wait, 1 once x is loaded and reduced (before the codes'
// stores), 2 at its exit; 3 before its wait (IB_QUANT_SYNC=2). sync (null: none): the block
// counts itself into sync[0] once its codes and scale are stored (GemvQuant::sync).
constexpr int kMaxVecs = 8;
template <typename T, typename TQ, bool kRms>
__global__ void __launch_bounds__(kThreads)
    quantize_rows_vec_kernel(const T* __restrict__ src, const T* __restrict__ gain, float eps,
                             TQ* __restrict__ dst, float* __restrict__ scales, int64_t k,
                             StaticActQuant fixed, int trigger, unsigned* sync) {
  static_assert(sizeof(T) == 2, "8 elements per 16-byte vector");
  __shared__ float scratch[32];
  const int nvec = static_cast<int>(k / 8);
  const uint4* row = reinterpret_cast<const uint4*>(src + blockIdx.x * k);
  const uint4* g = reinterpret_cast<const uint4*>(gain);
  uint2* q = reinterpret_cast<uint2*>(dst + blockIdx.x * k);
  if (trigger == 3) pdl_trigger();
  pdl_wait();
  if (trigger == 0) pdl_trigger();
  uint4 xv[kMaxVecs], gv[kMaxVecs];
#pragma unroll
  for (int j = 0; j < kMaxVecs; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kThreads;
    gv[j] = uint4{};
    if (i < nvec) {
      xv[j] = row[i];
      if (gain) gv[j] = __ldg(g + i);
    }
  }
  const bool has_gain = gain != nullptr;
  float amax = 0.0f, ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxVecs; ++j) {
    if (static_cast<int>(threadIdx.x) + j * kThreads >= nvec) continue;
    quant_vec_stats<T, kRms>(xv[j], gv[j], has_gain, ss, amax);
  }
  const QuantRowScale r = quant_row_scale<TQ, kRms>(amax, ss, k, eps, fixed, scratch);
  if (trigger == 1) pdl_trigger();
#pragma unroll
  for (int j = 0; j < kMaxVecs; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kThreads;
    if (i >= nvec) continue;
    q[i] = quant_vec_codes<T, TQ>(xv[j], gv[j], has_gain, r, fixed);
  }
  if (threadIdx.x == 0) scales[blockIdx.x] = r.scale;
  if (sync != nullptr) block_count_done(sync);
}

template <typename T, typename TQ>
bool launch_typed(const Tensor& src, const Tensor* gain, float eps, bool rms, Tensor dst,
                  Tensor scales, cudaStream_t stream, bool pdl, StaticActQuant fixed,
                  unsigned* sync) {
  const T* g = gain ? gain->as<const T>() : nullptr;
  const int64_t k = src.row_size();
  if constexpr (sizeof(T) == 2) {
    if (k % 8 == 0 && k <= int64_t{kThreads} * 8 * kMaxVecs && aligned16(src.data) &&
        reinterpret_cast<uintptr_t>(dst.data) % 8 == 0 && (g == nullptr || aligned16(g))) {
      const auto kernel =
          rms ? quantize_rows_vec_kernel<T, TQ, true> : quantize_rows_vec_kernel<T, TQ, false>;
      const int sync_mode = sync != nullptr ? g_quant_sync.load(std::memory_order_relaxed) : 0;
      const int trigger = sync_mode == 2 ? 3 : g_quant_trigger.load(std::memory_order_relaxed);
      launch_kernel("quantize_rows", pdl, kernel, dim3(static_cast<unsigned>(src.rows())),
                    dim3(kThreads), 0, stream, src.as<const T>(), g, eps, dst.as<TQ>(),
                    scales.as<float>(), k, fixed, trigger, sync_mode > 0 ? sync : nullptr);
      return sync_mode > 0;
    }
  }
  const auto kernel = rms ? quantize_rows_kernel<T, TQ, true> : quantize_rows_kernel<T, TQ, false>;
  launch_kernel("quantize_rows", pdl, kernel, dim3(static_cast<unsigned>(src.rows())),
                dim3(kThreads), 0, stream, src.as<const T>(), g, eps, dst.as<TQ>(),
                scales.as<float>(), src.row_size(), fixed);
  return false;
}

template <typename T>
__global__ void dequantize_int8_kernel(const int8_t* __restrict__ data,
                                       const float* __restrict__ scales, T* __restrict__ dst,
                                       int64_t n, int64_t k) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n * k;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = from_f32<T>(static_cast<float>(data[i]) * scales[i / k]);
  }
}

// The same 16 codes a thread (K a multiple of 16), written in two 16-byte stores; 32-bit index
// math (N * K / 16 < 2^32, checked by the launcher).
template <typename T>
__global__ void dequantize_int8_vec_kernel(const uint4* __restrict__ data,
                                           const float* __restrict__ scales,
                                           uint4* __restrict__ dst, uint32_t n,
                                           uint32_t row_chunks) {
  const uint32_t chunks = n * row_chunks;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < chunks;
       i += gridDim.x * blockDim.x) {
    const uint4 q = __ldg(data + i);
    const float s = scales[i / row_chunks];
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
    uint32_t v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t w = words[j / 2];
      v[j] = pack2_from_f32<T>(int8_byte_as_float(w, 2 * (j & 1)) * s,
                               int8_byte_as_float(w, 2 * (j & 1) + 1) * s);
    }
    dst[2 * size_t{i}] = make_uint4(v[0], v[1], v[2], v[3]);
    dst[2 * size_t{i} + 1] = make_uint4(v[4], v[5], v[6], v[7]);
  }
}

template <typename T>
__global__ void dequantize_int32_kernel(const int32_t* __restrict__ acc,
                                        const float* __restrict__ x_scales,
                                        const float* __restrict__ w_scales,
                                        const T* __restrict__ bias, T* __restrict__ out, int64_t m,
                                        int64_t n, int32_t zero,
                                        const int32_t* __restrict__ row_sums) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < m * n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t col = i % n;
    const int32_t sum = row_sums ? acc[i] - zero * row_sums[col] : acc[i];
    float y = static_cast<float>(sum) * x_scales[i / n] * w_scales[col];
    if (bias) y += to_f32(bias[col]);
    out[i] = from_f32<T>(y);
  }
}

// One warp per row: out[n] = sum_k data[n][k] (4 codes per __dp4a).
__global__ void weight_row_sums_kernel(const int8_t* __restrict__ data, int32_t* __restrict__ out,
                                       int64_t n, int64_t k) {
  const int64_t row = blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32;
  if (row >= n) return;
  const int lane = threadIdx.x % 32;
  const int8_t* r = data + row * k;
  int sum = 0;
  if (k % 4 == 0 && reinterpret_cast<uintptr_t>(data) % 4 == 0) {
    const int* words = reinterpret_cast<const int*>(r);
    for (int64_t i = lane; i < k / 4; i += 32) sum = __dp4a(words[i], 0x01010101, sum);
  } else {
    for (int64_t i = lane; i < k; i += 32) sum += r[i];
  }
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) out[row] = sum;
}

unsigned grid_of(int64_t elements) {
  return static_cast<unsigned>(std::min<int64_t>((elements + kThreads - 1) / kThreads, 65535));
}

}  // namespace

void launch_dequantize_int8(const WeightRef& w, Tensor dst, cudaStream_t stream) {
  IB_ASSERT(w.format != WeightFormat::kDense && w.quantized_layout_ok() &&
                w.data.dtype == DType::kI8 && dst.numel() == w.data.numel() &&
                (dst.dtype == DType::kBF16 || dst.dtype == DType::kF16),
            "dequantize_int8: an int8 weight (N, K) and dst (N, K) bf16/fp16");
  const int64_t n = w.data.dim(0), k = w.data.dim(1);
  if (n * k == 0) return;
  const bool vec = k % 16 == 0 && aligned16(w.data.data) && aligned16(dst.data) &&
                   n * (k / 16) < (int64_t{1} << 32);
  const auto launch = [&]<typename T>() {
    if (vec) {
      dequantize_int8_vec_kernel<T><<<grid_of(n * k / 16), kThreads, 0, stream>>>(
          static_cast<const uint4*>(w.data.data), w.scales.as<const float>(),
          static_cast<uint4*>(dst.data), static_cast<uint32_t>(n), static_cast<uint32_t>(k / 16));
    } else {
      dequantize_int8_kernel<T><<<grid_of(n * k), kThreads, 0, stream>>>(
          w.data.as<const int8_t>(), w.scales.as<const float>(), dst.as<T>(), n, k);
    }
  };
  if (dst.dtype == DType::kBF16) {
    launch.template operator()<bf16>();
  } else {
    launch.template operator()<f16>();
  }
  IB_CUDA_CHECK_LAUNCH("dequantize_int8");
}

void launch_dequantize_int32(const Tensor& acc, const Tensor& x_scales, const Tensor& w_scales,
                             const Tensor* bias, Tensor out, cudaStream_t stream, int32_t zero,
                             const Tensor* row_sums) {
  const int64_t m = out.rows(), n = out.row_size();
  IB_ASSERT(acc.dtype == DType::kI32 && acc.numel() == m * n && x_scales.numel() >= m &&
                w_scales.numel() == n && (bias == nullptr || bias->dtype == out.dtype),
            "dequantize_int32: acc (M, N) int32, x_scales (M), w_scales (N), bias of out's dtype");
  IB_ASSERT(zero == 0 ||
                (row_sums != nullptr && row_sums->dtype == DType::kI32 && row_sums->numel() == n),
            "dequantize_int32: a zero point needs the weight's row sums (N) int32");
  if (m * n == 0) return;
  IB_DISPATCH_FLOAT(out.dtype, T, {
    dequantize_int32_kernel<T><<<grid_of(m * n), kThreads, 0, stream>>>(
        acc.as<const int32_t>(), x_scales.as<const float>(), w_scales.as<const float>(),
        bias ? bias->as<const T>() : nullptr, out.as<T>(), m, n, zero,
        zero != 0 ? row_sums->as<const int32_t>() : nullptr);
  });
  IB_CUDA_CHECK_LAUNCH("dequantize_int32");
}

StaticActQuant static_act_quant(const WeightRef& w) {
  StaticActQuant f;
  if (!quantizes_activations(w.format) || w.input_scale <= 0.0f) return f;
  f.scale = w.input_scale;
  f.zero_point = w.input_asymmetric ? w.input_zero_point : 0;
  f.asymmetric = w.input_asymmetric;
  return f;
}

void launch_weight_row_sums(const WeightRef& w, Tensor out, cudaStream_t stream) {
  IB_ASSERT(w.quantized_layout_ok() && w.data.dtype == DType::kI8 && out.dtype == DType::kI32 &&
                out.numel() == w.data.rows(),
            "weight_row_sums: an int8 weight (N, K) and out (N) int32");
  const int64_t n = w.data.rows();
  if (n == 0) return;
  constexpr int64_t kRowsPerBlock = kThreads / 32;
  weight_row_sums_kernel<<<static_cast<unsigned>((n + kRowsPerBlock - 1) / kRowsPerBlock), kThreads,
                           0, stream>>>(w.data.as<const int8_t>(), out.as<int32_t>(), n,
                                        w.data.row_size());
  IB_CUDA_CHECK_LAUNCH("weight_row_sums");
}

void launch_quantize_rows(const Tensor& src, Tensor dst, Tensor scales, cudaStream_t stream,
                          StaticActQuant fixed) {
  launch_quantize_rms_rows(src, nullptr, 0.0f, false, dst, scales, stream, false, fixed);
}

bool launch_quantize_rms_rows(const Tensor& src, const Tensor* gain, float eps, bool rms,
                              Tensor dst, Tensor scales, cudaStream_t stream, bool pdl,
                              StaticActQuant fixed, unsigned* sync) {
  IB_ASSERT(!fixed.asymmetric || dst.dtype == DType::kI8,
            "quantize_rows: an asymmetric static activation scale is int8's");
  IB_ASSERT((dst.dtype == DType::kF8E4M3 || dst.dtype == DType::kI8) &&
                scales.dtype == DType::kF32 && dst.numel() == src.numel() &&
                scales.numel() == src.rows(),
            "quantize_rows: dst (N, K) fp8_e4m3 or int8 and scales f32 (N) for src (N, K)");
  if (gain) {
    IB_ASSERT(gain->dtype == src.dtype && gain->numel() == src.row_size(),
              "quantize_rows: gain (K) of src's dtype");
  }
  if (src.rows() == 0) return false;
  bool synced = false;
  IB_DISPATCH_FLOAT(src.dtype, T, {
    if (dst.dtype == DType::kI8) {
      synced = launch_typed<T, int8_t>(src, gain, eps, rms, dst, scales, stream, pdl, fixed, sync);
    } else {
      synced = launch_typed<T, uint8_t>(src, gain, eps, rms, dst, scales, stream, pdl, fixed, sync);
    }
  });
  return synced;
}

void set_quant_trigger(int where) {
  IB_ASSERT(where >= 0 && where <= 2, "set_quant_trigger: 0, 1 or 2");
  g_quant_trigger.store(where, std::memory_order_relaxed);
}

int quant_trigger() {
  return g_quant_trigger.load(std::memory_order_relaxed);
}

void set_quant_sync(int mode) {
  IB_ASSERT(mode >= 0 && mode <= 2, "set_quant_sync: 0, 1 or 2");
  g_quant_sync.store(mode, std::memory_order_relaxed);
}

int quant_sync() {
  return g_quant_sync.load(std::memory_order_relaxed);
}

}  // namespace ib::cuda
