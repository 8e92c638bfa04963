// Sampling on the GPU, one block per row of logits.
//
// Greedy: argmax, lowest index on ties. Stochastic (SamplingMetadata): every token gets a 64-bit
// key that orders tokens by descending logit, then ascending index (so keys are unique), and a
// fixed-point weight W = exp((l - max) / T) * 2^40. Top-k, top-p and the inverse-CDF draw are
// each a radix select over the keys (8 bits per pass, stopping as soon as the chosen bucket holds
// one token): "the key at which the count / mass of larger keys reaches the target". Integer
// masses make the result independent of summation order, so a seed reproduces exactly. Warps
// aggregate their histogram updates (match_any + reduce) so skewed logits do not serialise on
// shared-memory atomics.
#include <cmath>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/pdl.cuh"
#include "core/rng.h"

namespace ib::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kMassScale = 1099511627776.0f;  // 2^40

struct ArgMax {
  float value;
  int index;
};
__device__ __forceinline__ ArgMax better(ArgMax a, ArgMax b) {
  if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
  return a;
}

// Visits every index of the row once: each lane takes 8 consecutive logits per iteration (two
// 16-byte loads when the row allows), so a sweep of a 128k vocabulary is ~16 dependent load
// rounds per warp instead of ~250. The loop is warp-uniform; visit(valid, value, index) is
// called by all 32 lanes together (warp collectives are allowed inside).
template <typename Visit>
__device__ __forceinline__ void sweep_row(const float* row, int vocab, bool vector_ok,
                                          Visit&& visit) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int base = warp * 256; base < vocab; base += kThreads * 8) {
    const int i0 = base + lane * 8;
    float v[8];
    if (vector_ok && i0 + 8 <= vocab) {
      const float4 a = *reinterpret_cast<const float4*>(row + i0);
      const float4 b = *reinterpret_cast<const float4*>(row + i0 + 4);
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z,
      v[7] = b.w;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = i0 + e < vocab ? row[i0 + e] : 0.0f;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) visit(i0 + e < vocab, v[e], i0 + e);
  }
}

__device__ __forceinline__ bool row_vector_ok(const float* row, int vocab) {
  return vocab % 4 == 0 && (reinterpret_cast<uintptr_t>(row) & 15u) == 0;
}

// Block-wide argmax over row (NaN never wins). Every thread gets the result.
__device__ ArgMax block_argmax(const float* row, int vocab, ArgMax* scratch) {
  ArgMax best{-INFINITY, vocab};
  sweep_row(row, vocab, row_vector_ok(row, vocab), [&](bool valid, float v, int i) {
    if (valid && (v > best.value || (best.index == vocab && !isnan(v))))
      best = better(best, {v, i});
  });
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const ArgMax other{__shfl_xor_sync(kFull, best.value, o),
                       __shfl_xor_sync(kFull, best.index, o)};
    best = better(best, other);
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = best;
  __syncthreads();
  best = scratch[0];
  for (int w = 1; w < kWarps; ++w) best = better(best, scratch[w]);
  return best;
}

__device__ __forceinline__ uint64_t make_key(float logit, int index) {
  uint32_t u = __float_as_uint(isnan(logit) ? -INFINITY : logit);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (uint64_t{u} << 32) | (0xffffffffu - static_cast<uint32_t>(index));
}
__device__ __forceinline__ int key_index(uint64_t key) {
  return static_cast<int>(0xffffffffu - static_cast<uint32_t>(key));
}

struct SelectShared {
  unsigned long long mass[256];
  unsigned long long max_key[256];
  unsigned count[256];
  // The chosen bucket, published by warp 0.
  unsigned long long above_mass, bucket_mass, bucket_key;
  unsigned above_count, bucket_count;
  int bucket;
};

struct SelectResult {
  uint64_t key;      // the selected token's key
  uint64_t mass_ge;  // mass of all keys >= key (among those filtered)
};

struct RowContext {
  const float* logits;
  int vocab;
  bool vector_ok;
  float max_logit;
  float inv_temp_log2;  // log2(e) / temperature
  __device__ uint64_t weight(float logit) const {
    if (isnan(logit)) return 0;
    return __float2ull_rn(exp2f((logit - max_logit) * inv_temp_log2) * kMassScale);
  }
};

// The largest key kappa among tokens with key >= filter_min such that the count (or mass) of
// tokens with key >= kappa reaches target. All threads call; all get the result.
__device__ SelectResult block_select(const RowContext& row, uint64_t filter_min, uint64_t target,
                                     bool by_mass, SelectShared& sm) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  uint64_t prefix = 0, mask = 0;
  uint64_t above_mass = 0;
  unsigned above_count = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) {
      sm.mass[b] = 0;
      sm.max_key[b] = 0;
      sm.count[b] = 0;
    }
    __syncthreads();
    sweep_row(row.logits, row.vocab, row.vector_ok, [&](bool valid, float l, int i) {
      const uint64_t key = make_key(l, i);
      const bool in = valid && key >= filter_min && (key & mask) == prefix;
      const uint64_t w = in && by_mass ? row.weight(l) : 0;
      const unsigned bucket = in ? static_cast<unsigned>((key >> shift) & 255u) : 256u;
      // Late passes filter out almost everything, and early ones often put a whole warp in one
      // bucket: both skip the (slow) match_any.
      const unsigned in_mask = __ballot_sync(kFull, in);
      if (in_mask == 0) return;
      const unsigned first_bucket = __shfl_sync(kFull, bucket, __ffs(in_mask) - 1);
      const bool one_bucket = __all_sync(kFull, !in || bucket == first_bucket);
      const unsigned peers =
          one_bucket ? (in ? in_mask : ~in_mask) : __match_any_sync(kFull, bucket);
      const unsigned hi = __reduce_add_sync(peers, static_cast<unsigned>(w >> 20));
      const unsigned lo = __reduce_add_sync(peers, static_cast<unsigned>(w & 0xfffffu));
      const int count = __popc(peers);
      if (in && lane == __ffs(peers) - 1) {
        atomicAdd(&sm.count[bucket], static_cast<unsigned>(count));
        if (by_mass) atomicAdd(&sm.mass[bucket], (static_cast<unsigned long long>(hi) << 20) + lo);
        if (count == 1) atomicMax(&sm.max_key[bucket], static_cast<unsigned long long>(key));
      }
    });
    __syncthreads();
    if (warp == 0) {
      // Lane L covers buckets 255 - 8L - j, j = 0..7 (descending keys).
      unsigned long long lane_mass = 0;
      unsigned lane_count = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        lane_mass += sm.mass[255 - 8 * lane - j];
        lane_count += sm.count[255 - 8 * lane - j];
      }
      unsigned long long incl_mass = lane_mass;
      unsigned incl_count = lane_count;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long m = __shfl_up_sync(kFull, incl_mass, o);
        const unsigned c = __shfl_up_sync(kFull, incl_count, o);
        if (lane >= o) {
          incl_mass += m;
          incl_count += c;
        }
      }
      const uint64_t incl = by_mass ? incl_mass : incl_count;
      const uint64_t excl = incl - (by_mass ? lane_mass : lane_count);
      const uint64_t have = by_mass ? above_mass : above_count;
      // The lane whose range crosses the target; the last non-empty lane if rounding left none.
      const unsigned crossing = __ballot_sync(kFull, have + excl < target && target <= have + incl);
      const unsigned nonempty = __ballot_sync(kFull, (by_mass ? lane_mass : lane_count) > 0);
      const int chosen = crossing ? __ffs(crossing) - 1 : (nonempty ? 31 - __clz(nonempty) : 0);
      if (lane == chosen) {
        unsigned long long cm = above_mass + (incl_mass - lane_mass);
        unsigned cc = above_count + (incl_count - lane_count);
        int bucket = 255 - 8 * lane;
        for (int j = 0; j < 8; ++j) {
          const int b = 255 - 8 * lane - j;
          bucket = b;
          const uint64_t v = by_mass ? sm.mass[b] : sm.count[b];
          const uint64_t before = by_mass ? cm : cc;
          if (v > 0 && before + v >= target) break;
          if (j < 7) {
            cm += sm.mass[b];
            cc += sm.count[b];
          }
        }
        sm.bucket = bucket;
        sm.above_mass = cm;
        sm.above_count = cc;
        sm.bucket_mass = sm.mass[bucket];
        sm.bucket_count = sm.count[bucket];
        sm.bucket_key = sm.max_key[bucket];
      }
    }
    __syncthreads();
    const int bucket = sm.bucket;
    above_mass = sm.above_mass;
    above_count = sm.above_count;
    const unsigned bucket_count = sm.bucket_count;
    const uint64_t bucket_mass = sm.bucket_mass;
    const uint64_t bucket_key = sm.bucket_key;
    prefix |= static_cast<uint64_t>(bucket) << shift;
    mask |= uint64_t{255} << shift;
    __syncthreads();  // everyone has read the published bucket before the next pass resets it
    if (bucket_count == 1 || shift == 0)
      return {bucket_count == 1 ? bucket_key : prefix, above_mass + bucket_mass};
  }
  return {prefix, above_mass};  // not reached
}

// Mass of the tokens with key >= filter_min (integer sum: order-independent).
__device__ uint64_t block_mass(const RowContext& row, uint64_t filter_min,
                               unsigned long long* scratch) {
  unsigned long long sum = 0;
  sweep_row(row.logits, row.vocab, row.vector_ok, [&](bool valid, float l, int i) {
    if (valid && make_key(l, i) >= filter_min) sum += row.weight(l);
  });
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(kFull, sum, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = sum;
  __syncthreads();
  sum = 0;
  for (int w = 0; w < kWarps; ++w) sum += scratch[w];
  return sum;
}

struct SampleArgs {
  const float* logits;
  int vocab;
  const float* temperature;
  const int32_t* top_k;
  const float* top_p;
  const int64_t* seed;
  const int32_t* step;
  int32_t* out;
};

__global__ void __launch_bounds__(kThreads) greedy_kernel(SampleArgs a) {
  __shared__ ArgMax scratch[kWarps];
  const ArgMax best = block_argmax(a.logits + int64_t{blockIdx.x} * a.vocab, a.vocab, scratch);
  if (threadIdx.x == 0) a.out[blockIdx.x] = best.index < a.vocab ? best.index : 0;
}

// Greedy over many blocks per row: grid (chunks, rows); block (c, r) writes the argmax of
// logits [c * kArgmaxChunk, (c + 1) * kArgmaxChunk) of row r to partial[r * chunks + c].
constexpr int kArgmaxChunk = 8192;
constexpr int kNoIndex = 0x7fffffff;

__global__ void __launch_bounds__(kThreads) argmax_partial_kernel(SampleArgs a, ArgMax* partial) {
  __shared__ ArgMax scratch[kWarps];
  pdl_wait();
  pdl_trigger();
  const int begin = blockIdx.x * kArgmaxChunk;
  const int len = min(kArgmaxChunk, a.vocab - begin);
  const ArgMax best = block_argmax(a.logits + int64_t{blockIdx.y} * a.vocab + begin, len, scratch);
  if (threadIdx.x == 0)
    partial[blockIdx.y * gridDim.x + blockIdx.x] =
        ArgMax{best.value, best.index < len ? begin + best.index : kNoIndex};
}

// One warp per row combines the row's partial results.
__global__ void argmax_final_kernel(const ArgMax* partial, int chunks, int32_t* out) {
  pdl_wait();
  pdl_trigger();
  ArgMax best{-INFINITY, kNoIndex};
  for (int c = threadIdx.x; c < chunks; c += 32)
    best = better(best, partial[blockIdx.x * chunks + c]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const ArgMax other{__shfl_xor_sync(kFull, best.value, o),
                       __shfl_xor_sync(kFull, best.index, o)};
    best = better(best, other);
  }
  if (threadIdx.x == 0) out[blockIdx.x] = best.index == kNoIndex ? 0 : best.index;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleArgs a) {
  __shared__ ArgMax scratch[kWarps];
  __shared__ SelectShared sm;
  __shared__ unsigned long long scratch_mass[kWarps];
  const int r = blockIdx.x;
  const float* logits = a.logits + int64_t{r} * a.vocab;
  const ArgMax best = block_argmax(logits, a.vocab, scratch);
  const float temperature = a.temperature[r];
  if (temperature <= 0.0f || best.index >= a.vocab) {
    if (threadIdx.x == 0) a.out[r] = best.index < a.vocab ? best.index : 0;
    return;
  }
  const RowContext row{logits, a.vocab, row_vector_ok(logits, a.vocab), best.value,
                       kLog2e / temperature};
  const int k = a.top_k[r];
  // Top-k: keys >= the k-th largest key stay.
  uint64_t kept_key =
      (k > 0 && k < a.vocab) ? block_select(row, 0, static_cast<uint64_t>(k), false, sm).key : 0;
  uint64_t kept_mass = block_mass(row, kept_key, scratch_mass);
  // Top-p: the smallest prefix (descending probability) whose mass reaches top_p of the kept.
  const float top_p = a.top_p[r];
  if (top_p < 1.0f) {
    double t = ceil(static_cast<double>(top_p) * static_cast<double>(kept_mass));
    t = fmin(fmax(t, 1.0), static_cast<double>(kept_mass));
    const SelectResult cut = block_select(row, kept_key, static_cast<uint64_t>(t), true, sm);
    kept_key = cut.key;
    kept_mass = cut.mass_ge;
  }
  // Inverse CDF over the kept tokens in descending probability.
  const float u =
      counter_uniform(static_cast<uint64_t>(a.seed[r]), 0, static_cast<uint64_t>(a.step[r]));
  const uint64_t target =
      static_cast<uint64_t>(floor(static_cast<double>(u) * static_cast<double>(kept_mass))) + 1;
  const SelectResult drawn = block_select(row, kept_key, target, true, sm);
  if (threadIdx.x == 0) a.out[r] = key_index(drawn.key);
}

}  // namespace

void launch_sample(const Tensor& logits, const SamplingMetadata& meta, Tensor out_tokens,
                   void* workspace, size_t workspace_bytes, cudaStream_t stream, bool pdl) {
  if (meta.num_rows == 0) return;
  SampleArgs a{};
  a.logits = logits.as<float>();
  a.vocab = static_cast<int>(logits.row_size());
  a.out = out_tokens.as<int32_t>();
  const auto rows = static_cast<unsigned>(meta.num_rows);
  const int chunks = (a.vocab + kArgmaxChunk - 1) / kArgmaxChunk;
  const size_t partial_bytes = size_t{rows} * static_cast<size_t>(chunks) * sizeof(ArgMax);
  if (meta.all_greedy && chunks > 1 && partial_bytes <= workspace_bytes) {
    auto* partial = static_cast<ArgMax*>(workspace);
    launch_kernel("sample(argmax)", pdl, argmax_partial_kernel,
                  dim3(static_cast<unsigned>(chunks), rows), dim3(kThreads), 0, stream, a, partial);
    launch_kernel("sample(argmax)", pdl, argmax_final_kernel, dim3(rows), dim3(32), 0, stream,
                  static_cast<const ArgMax*>(partial), chunks, a.out);
  } else if (meta.all_greedy) {
    greedy_kernel<<<rows, kThreads, 0, stream>>>(a);
  } else {
    a.temperature = meta.temperature.as<float>();
    a.top_k = meta.top_k.as<int32_t>();
    a.top_p = meta.top_p.as<float>();
    a.seed = meta.seed.as<int64_t>();
    a.step = meta.step.as<int32_t>();
    sample_kernel<<<rows, kThreads, 0, stream>>>(a);
  }
  IB_CUDA_CHECK_LAUNCH("sample");
}

}  // namespace ib::cuda
