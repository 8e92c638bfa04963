// RoPE (rotate-half) on the q and k heads of the fused qkv rows, in place, fused with the write
// of the rotated k and of v into the paged KV cache (act or E4M3): one thread per rotated pair or
// v pair, or (IB_ROPE_VEC, set_rope_vec) per 16-byte vector of pairs.
#include <atomic>
#include <type_traits>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kVecThreads = 256;

std::atomic<bool> g_rope_vec{true};           // IB_ROPE_VEC
std::atomic<int64_t> g_rope_vec_launches{0};  // launches of the vector form

// One rotated pair: (x1, x2) -> (x1 c - x2 s, x2 c + x1 s), each with one product rounded and one
// FMA, so that both forms compute it alike whatever the compiler would contract (the angle, pos *
// inv_freq, is one rounded product in both for the same reason).
__device__ __forceinline__ void rotate_pair(float x1, float x2, float c, float s, float& o1,
                                            float& o2) {
  o1 = fmaf(x1, c, -__fmul_rn(x2, s));
  o2 = fmaf(x2, c, __fmul_rn(x1, s));
}

// Cache element (block, kv_head, offset, d) of slot (>= 0).
__device__ __forceinline__ int64_t cache_element(int32_t slot, int kv_head, int d, int num_kv_heads,
                                                 int block_size, int head_dim) {
  const int64_t block = slot / block_size;
  const int offset = slot % block_size;
  return ((block * num_kv_heads + kv_head) * block_size + offset) * int64_t{head_dim} + d;
}

// qkv (T, (Hq + 2 Hkv) * hd); positions, slot_mapping int32 (T); inv_freq f32 (hd / 2);
// k_cache, v_cache (num_blocks, Hkv, block_size, hd) of TC: T, or E4M3 bytes with k_scale /
// v_scale (to_kv_cache). grid (T, ceil(items / kThreads)); one item per thread: a rotated (q or
// k) pair, or a pair of v elements copied into the cache.
template <typename T, typename TC>
__global__ void __launch_bounds__(kThreads)
    rope_and_cache_kernel(T* qkv, const int32_t* positions, const int32_t* slot_mapping,
                          const float* inv_freq, TC* k_cache, TC* v_cache, float k_scale,
                          float v_scale, int num_heads, int num_kv_heads, int head_dim,
                          int block_size) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const int half = head_dim / 2;
  const int rot_items = (num_heads + num_kv_heads) * half;
  const int v_items = num_kv_heads * half;
  const int i = blockIdx.y * kThreads + threadIdx.x;
  if (i >= rot_items + v_items) return;
  T* row = qkv + t * int64_t{num_heads + 2 * num_kv_heads} * head_dim;
  const int32_t slot = slot_mapping[t];
  const auto cache_index = [&](int kv_head, int d) {  // slot >= 0
    return cache_element(slot, kv_head, d, num_kv_heads, block_size, head_dim);
  };
  if (i >= rot_items) {  // v: elements j and j + half of one kv head
    if (slot < 0) return;
    const int kv_head = (i - rot_items) / half;
    const int j = (i - rot_items) % half;
    const T* v = row + int64_t{num_heads + num_kv_heads + kv_head} * head_dim;
    v_cache[cache_index(kv_head, j)] = to_kv_cache<TC>(v[j], v_scale);
    v_cache[cache_index(kv_head, j + half)] = to_kv_cache<TC>(v[j + half], v_scale);
    return;
  }
  const int head = i / half;
  const int j = i % half;
  T* h = row + int64_t{head} * head_dim;
  const float x1 = to_f32(h[j]);
  const float x2 = to_f32(h[j + half]);
  float s, c;
  sincosf(__fmul_rn(static_cast<float>(positions[t]), inv_freq[j]), &s, &c);
  float r1, r2;
  rotate_pair(x1, x2, c, s, r1, r2);
  const T o1 = from_f32<T>(r1);
  const T o2 = from_f32<T>(r2);
  h[j] = o1;
  h[j + half] = o2;
  if (head >= num_heads && slot >= 0) {
    k_cache[cache_index(head - num_heads, j)] = to_kv_cache<TC>(o1, k_scale);
    k_cache[cache_index(head - num_heads, j + half)] = to_kv_cache<TC>(o2, k_scale);
  }
}

// kV values of T (rounded) into the cache at p as TC: T itself (one 16-byte store) or E4M3 bytes
// (one kV-byte store).
template <typename T, typename TC, int kV>
__device__ __forceinline__ void store_cache_vec(TC* p, const T (&v)[kV], float scale) {
  if constexpr (std::is_same_v<TC, T>) {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(v);
  } else {
    static_assert(kV == 8 || kV == 4, "E4M3 stores of 8 or 4 bytes");
    alignas(kV) uint8_t b[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e) b[e] = to_kv_cache<TC>(v[e], scale);
    if constexpr (kV == 8) {
      *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(b);
    } else {
      *reinterpret_cast<uint32_t*>(p) = *reinterpret_cast<const uint32_t*>(b);
    }
  }
}

// The vector form: items flattened over the tokens, (Hq + 2 Hkv) * (hd / 2 / kV) a token; an item
// is kV consecutive pairs of one head (a 16-byte vector of each half: a warp reads and writes 128
// contiguous bytes of each), rotated as rope_and_cache_kernel does each pair, or kV pairs of v
// copied into the cache. Needs hd / 2 % kV == 0 and 16-byte aligned qkv and inv_freq.
template <typename T, typename TC>
__global__ void __launch_bounds__(kVecThreads)
    rope_and_cache_vec_kernel(T* qkv, const int32_t* positions, const int32_t* slot_mapping,
                              const float* inv_freq, TC* k_cache, TC* v_cache, float k_scale,
                              float v_scale, int num_heads, int num_kv_heads, int head_dim,
                              int block_size, uint32_t items) {
  constexpr int kV = kVec16<T>;
  pdl_wait();
  pdl_trigger();
  const uint32_t i = blockIdx.x * uint32_t{kVecThreads} + threadIdx.x;
  if (i >= items) return;
  const int half = head_dim / 2;
  const uint32_t vecs = static_cast<uint32_t>(half / kV);  // items a head
  const uint32_t per_token = static_cast<uint32_t>(num_heads + 2 * num_kv_heads) * vecs;
  const uint32_t t = i / per_token;
  const uint32_t r = i - t * per_token;
  const int head = static_cast<int>(r / vecs);
  const int j0 = static_cast<int>(r - static_cast<uint32_t>(head) * vecs) * kV;
  T* h = qkv + int64_t{t} * (int64_t{num_heads + 2 * num_kv_heads} * head_dim) +
         int64_t{head} * head_dim;
  const int32_t slot = slot_mapping[t];
  if (head >= num_heads + num_kv_heads) {  // v: copied into the cache
    if (slot < 0) return;
    const int kv_head = head - num_heads - num_kv_heads;
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      const int d = j0 + part * half;
      const uint4 raw = *reinterpret_cast<const uint4*>(h + d);
      store_cache_vec<T, TC, kV>(
          v_cache + cache_element(slot, kv_head, d, num_kv_heads, block_size, head_dim),
          *reinterpret_cast<const T(*)[kV]>(&raw), v_scale);
    }
    return;
  }
  float x1[kV], x2[kV], f[kV];
  load16_f32(h + j0, x1);
  load16_f32(h + half + j0, x2);
#pragma unroll
  for (int e = 0; e < kV; e += 4) {
    const float4 q = *reinterpret_cast<const float4*>(inv_freq + j0 + e);
    f[e] = q.x;
    f[e + 1] = q.y;
    f[e + 2] = q.z;
    f[e + 3] = q.w;
  }
  const float p = static_cast<float>(positions[t]);
  alignas(16) T o1[kV];
  alignas(16) T o2[kV];
#pragma unroll
  for (int e = 0; e < kV; ++e) {
    float s, c, r1, r2;
    sincosf(__fmul_rn(p, f[e]), &s, &c);
    rotate_pair(x1[e], x2[e], c, s, r1, r2);
    o1[e] = from_f32<T>(r1);
    o2[e] = from_f32<T>(r2);
  }
  *reinterpret_cast<uint4*>(h + j0) = *reinterpret_cast<const uint4*>(o1);
  *reinterpret_cast<uint4*>(h + half + j0) = *reinterpret_cast<const uint4*>(o2);
  if (head >= num_heads && slot >= 0) {
    const int kv_head = head - num_heads;
    store_cache_vec<T, TC, kV>(
        k_cache + cache_element(slot, kv_head, j0, num_kv_heads, block_size, head_dim), o1,
        k_scale);
    store_cache_vec<T, TC, kV>(
        k_cache + cache_element(slot, kv_head, j0 + half, num_kv_heads, block_size, head_dim), o2,
        k_scale);
  }
}

}  // namespace

void set_rope_vec(bool on) {
  g_rope_vec.store(on, std::memory_order_relaxed);
}

bool rope_vec() {
  return g_rope_vec.load(std::memory_order_relaxed);
}

int64_t rope_vec_launches() {
  return g_rope_vec_launches.load(std::memory_order_relaxed);
}

void launch_rope_and_cache(Tensor qkv, const Tensor& positions, const Tensor& slot_mapping,
                           const Tensor& inv_freq, const KvCacheLayer& kv,
                           const AttentionShape& shape, cudaStream_t stream, bool pdl) {
  const int64_t tokens = qkv.dim(0);
  if (tokens == 0) return;
  const int heads = shape.num_heads + 2 * shape.num_kv_heads;
  const int half = shape.head_dim / 2;
  const int vec = 16 / static_cast<int>(dtype_size(qkv.dtype));
  const int64_t vec_items = tokens * heads * (half / vec);
  // The vector form's conditions: whole vectors a half (so every vector, in qkv and in the cache,
  // starts at a multiple of its bytes from 16-byte aligned bases), and a 32-bit item count.
  const bool vector = rope_vec() && half % vec == 0 && aligned16(qkv.data) &&
                      aligned16(inv_freq.data) && aligned16(kv.k.data) && aligned16(kv.v.data) &&
                      vec_items < (int64_t{1} << 31);
  const int items = heads * half;
  const dim3 grid(static_cast<unsigned>(tokens),
                  static_cast<unsigned>((items + kThreads - 1) / kThreads));
  const auto launch = [&](auto* k_cache, auto* v_cache, auto* q) {
    using T = std::remove_pointer_t<decltype(q)>;
    using TC = std::remove_pointer_t<decltype(k_cache)>;
    if (vector) {
      const auto n = static_cast<uint32_t>(vec_items);
      launch_kernel("rope_and_cache", pdl, rope_and_cache_vec_kernel<T, TC>,
                    dim3((n + kVecThreads - 1) / kVecThreads), dim3(kVecThreads), 0, stream, q,
                    positions.as<int32_t>(), slot_mapping.as<int32_t>(), inv_freq.as<float>(),
                    k_cache, v_cache, kv.k_scale, kv.v_scale, shape.num_heads, shape.num_kv_heads,
                    shape.head_dim, kv.block_size, n);
      g_rope_vec_launches.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    launch_kernel("rope_and_cache", pdl, rope_and_cache_kernel<T, TC>, grid, dim3(kThreads), 0,
                  stream, q, positions.as<int32_t>(), slot_mapping.as<int32_t>(),
                  inv_freq.as<float>(), k_cache, v_cache, kv.k_scale, kv.v_scale, shape.num_heads,
                  shape.num_kv_heads, shape.head_dim, kv.block_size);
  };
  IB_DISPATCH_FLOAT(qkv.dtype, T, {
    if (kv.k.dtype == DType::kF8E4M3) {
      launch(kv.k.as<uint8_t>(), kv.v.as<uint8_t>(), qkv.as<T>());
    } else {
      launch(kv.k.as<T>(), kv.v.as<T>(), qkv.as<T>());
    }
  });
}

}  // namespace ib::cuda
