// The decode GEMV's epilogue (gemv_kernel.cuh): a row tile's results from the warps' partial sums,
// scaled (the norm, the quantized formats' row and token scales), with the bias and LoRA term,
// then stored, added to the residual, combined as SwiGLU, or rotated and written to the KV cache.
#pragma once

#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/gemv_lora_tile.cuh"
#include "backend/cuda/detail/gemv_steps.cuh"

namespace ib::cuda {

// The block's results for row tile `tile` (rows from n0) from the warps' partial sums: the
// epilogue of gemv_kernel (kRms: inv_rms per token; the quantized formats' row scales; kLora: the
// LoRA term of each result, from the operands staged in lsm).
template <typename T, typename TOut, int NT, int kWarps, int kEpilogue, bool kRms, int kW,
          bool kLora, bool kChain>
__device__ __forceinline__ void gemv_epilogue(const float (&partial)[kWarps][NT][4][32],
                                              const float* w_scale, const int* w_row_sum,
                                              const float* inv_rms, int tile, int64_t n0,
                                              const T* __restrict__ bias, TOut* __restrict__ out,
                                              int m, int n, const GemvRopeCache& rc,
                                              const GemvQuant& fp8, const GemvLora& lora,
                                              const GemvLoraSmem<T>& lsm) {
  constexpr bool kXq = kW == kGemvFp8 || kW == kGemvInt8A8;
  constexpr bool kSwiGlu = kEpilogue == kGemvSwiGlu;
  [[maybe_unused]] const int n_out = kSwiGlu ? n / 2 : n;
  // The LoRA term of (token, tile row j) (result()'s row convention).
  const auto lora_term = [&](int token, int j) {
    if constexpr (kLora) {
      const float v = gemv_lora_term<T>(lora, lsm, token, j);
      if constexpr (kRms && !kXq) {
        if (lora.u_rms) return v * inv_rms[token];
      }
      return v;
    } else {
      return 0.0f;
    }
  };
  // A chained shrink's input: the output (token, tile feature f) as stored.
  [[maybe_unused]] const auto keep_for_chain = [&](int token, int f, TOut stored) {
    if constexpr (kChain) lsm.chain[token * kGemvRows + f] = to_f32(stored);
  };
  // The block's result for (token, row of the 16-row tile).
  const auto result = [&](int token, int row) {
    const int t = token / 8;
    const int col = token % 8;
    const int src_lane = (row % 8) * 4 + col / 2;
    const int reg = (row / 8) * 2 + col % 2;
    float sum = 0.0f;
    if constexpr (kW == kGemvInt8A8) {  // int32 bit patterns, summed exactly
      int isum = 0;
#pragma unroll
      for (int wi = 0; wi < kWarps; ++wi) isum += __float_as_int(partial[wi][t][reg][src_lane]);
      sum = static_cast<float>(isum - fp8.zero * w_row_sum[row]);
    } else {
#pragma unroll
      for (int wi = 0; wi < kWarps; ++wi) sum += partial[wi][t][reg][src_lane];
    }
    if constexpr (kXq) sum = sum * fp8.x_scales[token] * w_scale[row];
    if constexpr (kW == kGemvInt8) sum *= w_scale[row];
    if constexpr (kRms && !kXq) sum *= inv_rms[token];
    return sum;
  };

  if constexpr (kEpilogue == kGemvRopeCache) {
    // Output o = token * 8 + i: the tile's rows i and i + 8 (a rotated pair, or two v rows).
    const int per_head = rc.head_dim / kGemvRows;
    const int head = tile / per_head;
    const int j = tile % per_head;
    const bool is_v = head >= rc.num_heads + rc.num_kv_heads;
    for (int o = threadIdx.x; o < NT * 8 * (kGemvRows / 2); o += kWarps * 32) {
      const int token = o / (kGemvRows / 2);
      const int i = o % (kGemvRows / 2);
      if (token >= m) continue;
      const int da = is_v ? j * kGemvRows + i : j * 8 + i;  // dims within the head
      const int db = is_v ? da + 8 : da + rc.head_dim / 2;
      float a = result(token, i);
      float b = result(token, i + 8);
      if (bias) {
        a += to_f32(bias[n0 + da]);
        b += to_f32(bias[n0 + db]);
      }
      a += lora_term(token, i);
      b += lora_term(token, i + 8);
      if (!is_v) {
        float sn, cs;
        sincosf(static_cast<float>(rc.positions[token]) * rc.inv_freq[da], &sn, &cs);
        const float ra = a * cs - b * sn;
        b = b * cs + a * sn;
        a = ra;
      }
      const TOut oa = from_f32<TOut>(a), ob = from_f32<TOut>(b);
      out[int64_t{token} * n + n0 + da] = oa;
      out[int64_t{token} * n + n0 + db] = ob;
      const int32_t slot = rc.slot_mapping[token];
      if (head >= rc.num_heads && slot >= 0) {
        const int kv_head = head - rc.num_heads - (is_v ? rc.num_kv_heads : 0);
        const int64_t base =
            ((int64_t{slot / rc.block_size} * rc.num_kv_heads + kv_head) * rc.block_size +
             slot % rc.block_size) *
            rc.head_dim;
        if (rc.cache_fp8) {
          const float scale = is_v ? rc.v_scale : rc.k_scale;
          auto* cache = static_cast<uint8_t*>(is_v ? rc.v_cache : rc.k_cache);
          cache[base + da] = to_kv_cache<uint8_t>(oa, scale);
          cache[base + db] = to_kv_cache<uint8_t>(ob, scale);
        } else {
          TOut* cache = static_cast<TOut*>(is_v ? rc.v_cache : rc.k_cache);
          cache[base + da] = oa;
          cache[base + db] = ob;
        }
      }
    }
  } else if constexpr (kSwiGlu) {
    // Output o = token * 8 + j: feature n0 + j from gate row j and up row j + 8 of the tile.
    for (int o = threadIdx.x; o < NT * 8 * (kGemvRows / 2); o += kWarps * 32) {
      const int token = o / (kGemvRows / 2);
      const int j = o % (kGemvRows / 2);
      const int64_t feature = n0 + j;
      if (token >= m || feature >= n_out) continue;
      float g = result(token, j);
      float u = result(token, j + 8);
      if (bias) {
        g += to_f32(bias[feature]);
        u += to_f32(bias[n_out + feature]);
      }
      g += lora_term(token, j);
      u += lora_term(token, j + 8);
      const TOut stored = from_f32<TOut>(g / (1.0f + expf(-g)) * u);
      out[int64_t{token} * n_out + feature] = stored;
      keep_for_chain(token, j, stored);
    }
  } else {
    // Output o = token * 16 + row: consecutive threads write consecutive features of one token.
    for (int o = threadIdx.x; o < NT * 8 * kGemvRows; o += kWarps * 32) {
      const int token = o / kGemvRows;
      const int row = o % kGemvRows;
      const int64_t feature = n0 + row;
      if (token >= m || feature >= n) continue;
      float sum = result(token, row);
      if (bias) sum += to_f32(bias[feature]);
      sum += lora_term(token, row);
      TOut* dst = out + int64_t{token} * n + feature;
      if constexpr (kEpilogue == kGemvAccumulate) sum += to_f32(*dst);
      const TOut stored = from_f32<TOut>(sum);
      *dst = stored;
      keep_for_chain(token, row, stored);
    }
  }
}

}  // namespace ib::cuda
