// RoPE (rotate-half) on the q and k heads of the fused qkv rows, in place, fused with the write
// of the rotated k and of v into the paged KV cache (act or E4M3): one thread per rotated pair or
// v pair.
#include <type_traits>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace {

constexpr int kThreads = 128;

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
  const int64_t block = slot >= 0 ? slot / block_size : 0;
  const int offset = slot >= 0 ? slot % block_size : 0;
  // Cache element (block, kv_head, offset, d).
  const auto cache_index = [&](int kv_head, int d) {
    return ((block * num_kv_heads + kv_head) * block_size + offset) * int64_t{head_dim} + d;
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
  sincosf(static_cast<float>(positions[t]) * inv_freq[j], &s, &c);
  const T o1 = from_f32<T>(x1 * c - x2 * s);
  const T o2 = from_f32<T>(x2 * c + x1 * s);
  h[j] = o1;
  h[j + half] = o2;
  if (head >= num_heads && slot >= 0) {
    k_cache[cache_index(head - num_heads, j)] = to_kv_cache<TC>(o1, k_scale);
    k_cache[cache_index(head - num_heads, j + half)] = to_kv_cache<TC>(o2, k_scale);
  }
}

}  // namespace

void launch_rope_and_cache(Tensor qkv, const Tensor& positions, const Tensor& slot_mapping,
                           const Tensor& inv_freq, const KvCacheLayer& kv,
                           const AttentionShape& shape, cudaStream_t stream, bool pdl) {
  const int64_t tokens = qkv.dim(0);
  if (tokens == 0) return;
  const int items = (shape.num_heads + 2 * shape.num_kv_heads) * (shape.head_dim / 2);
  const dim3 grid(static_cast<unsigned>(tokens),
                  static_cast<unsigned>((items + kThreads - 1) / kThreads));
  const auto launch = [&](auto* k_cache, auto* v_cache, auto* q) {
    using T = std::remove_pointer_t<decltype(q)>;
    using TC = std::remove_pointer_t<decltype(k_cache)>;
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
