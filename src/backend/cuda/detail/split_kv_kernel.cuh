// The split-KV paged-attention kernels (one query token per work item), as templates so the
// benchmark can time configurations side by side; attention_split_kv.cu launches the one the
// measurements chose.
//
// A block owns (query token, KV head, up to GC of the query heads sharing it, key partition),
// so the query heads of a GQA group read each K/V row once. Each warp walks chunks of 32 keys
// (one key per lane for the scores, then one head_dim slice per lane for P·V) with an online
// softmax; the warps merge in shared memory. With several partitions (split-KV, for long
// contexts or small batches) each block writes its (max, sum, unnormalised out) state; with
// `counters` the last block of each (token, KV head) to finish merges them in the same launch
// (a query whose keys fit one partition writes its output directly), otherwise the merge kernel
// combines them. Under a block-sparse pattern (backend/block_sparse.h) a query's keys are the
// pattern's only: key index i of the partitions is the query's i-th visible key
// (block_sparse_key), so the partitions split the keys it reads, not its whole context.
#pragma once

#include <cmath>
#include <type_traits>

#include "backend/backend.h"
#include "backend/cuda/detail/attention_common.cuh"
#include "backend/cuda/detail/attn_lora.cuh"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {

// PagedAttentionParams (its v_scale applied to each block's sums), then the partitions.
struct SplitParams : PagedAttentionParams {
  float* partial_o;    // (T, Hq, P, hd): unnormalised outputs per partition
  float* partial_ml;   // (T, Hq, P, 2): running max (log2 units) and sum per partition
  int num_partitions;  // blocks along the keys (grid z), sized for the longest context hinted
  // (T, gridDim.y) arrival counters, zero between launches, or nullptr: separate merge kernel.
  unsigned* counters;
  // Nonzero: each block first sends every K and V row of its keys toward L2 (prefetch_l2), so
  // the dependent loads of its chunks wait on L2 instead of HBM (bench/NOTES.md, phase 5).
  int prefetch_kv;
  // Under programmatic dependent launch (detail/pdl.cuh), nonzero: the next kernel may launch as
  // soon as this one starts (its weight loads then overlap these blocks); 0: at this one's exit.
  int trigger_early;
  // The LoRA lookahead of the op after the attention (detail/attn_lora.cuh; rank 0: none), taken
  // by the kLora instantiations only.
  AttnLora lora;
};

// Query token t's sequence and position; the end of its key indices and the first it sees
// (indices are positions, or with a block-sparse pattern the visible keys counted from 0).
struct QueryView {
  int seq, kv_len, key_begin, pos;
};
__device__ __forceinline__ QueryView query_view(const SplitParams& p, int t) {
  const int seq = find_sequence(p.batch, t);
  const int q_len = p.batch.query_start[seq + 1] - p.batch.query_start[seq];
  const int pos = p.batch.context_lens[seq] - q_len + (t - p.batch.query_start[seq]);
  if (p.sparse.enabled()) return {seq, block_sparse_num_keys(p.sparse, pos), 0, pos};
  const int key_begin = p.window > 0 ? max(0, pos - p.window + 1) : 0;
  return {seq, pos + 1, key_begin, pos};
}

// The cache row of key index key (QueryView) of the query's KV head.
__device__ __forceinline__ int64_t key_row(const SplitParams& p, const QueryView& qv, int key,
                                           int kv_head, int head_dim) {
  const int position = p.sparse.enabled() ? block_sparse_key(p.sparse, qv.pos, key) : key;
  return cache_row(p.batch, qv.seq, position, kv_head, p.num_kv_heads, head_dim);
}

// Fewest keys per partition: below this the merge costs more than the split gains.
inline constexpr int kSplitMinPartition = 256;

// Keys per partition for a query that sees kv_len keys: its keys spread evenly over the
// num_partitions blocks, at least kSplitMinPartition each, in whole 32-key warp chunks, so a
// query gets the partitions its own context needs whatever context the grid was sized for (a
// captured graph's longest).
__device__ __forceinline__ int partition_size_for(const SplitParams& p, int kv_len) {
  const int even = (kv_len + p.num_partitions - 1) / p.num_partitions;
  return max(kSplitMinPartition, (even + 31) / 32 * 32);
}

// The merging block's outputs of (token t, heads from head0): the `active` partitions' partials
// in order; kLora: each value as written also into o_s[0] (a, for the shares).
template <typename T, int HD, int kWarps, bool kLora, int GC>
__device__ __forceinline__ void merge_split_partials(const SplitParams& p, int t, int head0, int gc,
                                                     int active, float (&o_s)[kWarps][GC][HD]) {
  constexpr int kThreads = kWarps * 32;
  for (int i = threadIdx.x; i < gc * HD; i += kThreads) {
    const int g = i / HD;
    const int d = i % HD;
    const int head = head0 + g;
    const int64_t slot0 = (int64_t{t} * p.num_heads + head) * p.num_partitions;
    float mx = -INFINITY;
    for (int j = 0; j < active; ++j) mx = fmaxf(mx, __ldcg(&p.partial_ml[(slot0 + j) * 2]));
    const float ref = mx == -INFINITY ? 0.0f : mx;
    float sum = 0.0f, o = 0.0f;
    for (int j = 0; j < active; ++j) {
      const float f = exp2f(__ldcg(&p.partial_ml[(slot0 + j) * 2]) - ref);
      sum += __ldcg(&p.partial_ml[(slot0 + j) * 2 + 1]) * f;
      o += __ldcg(&p.partial_o[(slot0 + j) * HD + d]) * f;
    }
    T* out = static_cast<T*>(p.out) + (int64_t{t} * p.num_heads + head) * HD;
    const T v = from_f32<T>(sum > 0.0f ? o / sum : 0.0f);
    out[d] = v;
    if constexpr (kLora) o_s[0][g][d] = to_f32(v);  // a as written, for the shares
  }
}

// The end of a split-KV block: each warp's online-softmax state (m, l in log2
// units, acc: a head_dim slice of GC heads, kSlice values from (lane % (HD / kSlice)) * kSlice;
// the lanes past HD / kSlice hold copies) is merged across the warps in shared memory, then
// written as the output (one partition) or as this partition's partials; with counters, the last
// block of the (token, KV head chunk) to arrive merges the partials. kLora: the block that writes
// the chunk's outputs then computes its share of p.lora (attn_lora_finish; needs counters or
// one partition, and kWarps >= 2: o_s[0] and o_s[1] then hold the outputs and r's columns).
template <typename T, int HD, int GC, int kWarps, int kSlice = HD / 32, bool kLora = false>
__device__ __forceinline__ void finish_split_block(const SplitParams& p, const QueryView& qv, int t,
                                                   int head0, int gc, int part, int psize,
                                                   const float (&m)[GC], const float (&l)[GC],
                                                   const float (&acc)[GC][kSlice]) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kSliceLanes = HD / kSlice;
  static_assert(kSliceLanes * kSlice == HD && kSliceLanes <= 32, "a lane slice per row piece");
  __shared__ float m_s[kWarps][GC];
  __shared__ float l_s[kWarps][GC];
  __shared__ float o_s[kWarps][GC][HD];
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    if (lane == 0) {
      m_s[warp][g] = m[g];
      l_s[warp][g] = l[g];
    }
    if (lane < kSliceLanes) {
#pragma unroll
      for (int i = 0; i < kSlice; ++i) o_s[warp][g][lane * kSlice + i] = acc[g][i];
    }
  }
  __syncthreads();

  // Keys of this query fall into `active` partitions; the others returned early.
  const int active = (qv.kv_len + psize - 1) / psize;
  const bool direct = p.num_partitions == 1 || (p.counters != nullptr && active == 1);
  for (int i = threadIdx.x; i < gc * HD; i += kThreads) {
    const int g = i / HD;
    const int d = i % HD;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, m_s[w][g]);
    const float ref = mx == -INFINITY ? 0.0f : mx;
    float sum = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = exp2f(m_s[w][g] - ref);
      sum += l_s[w][g] * f;
      o += o_s[w][g][d] * f;
    }
    const int head = head0 + g;
    if (direct) {
      T* out = static_cast<T*>(p.out) + (int64_t{t} * p.num_heads + head) * HD;
      const T v = from_f32<T>(sum > 0.0f ? o / sum : 0.0f);
      out[d] = v;
      if constexpr (kLora) o_s[0][g][d] = to_f32(v);  // a as written, for the shares
    } else {
      const int64_t slot = (int64_t{t} * p.num_heads + head) * p.num_partitions + part;
      p.partial_o[slot * HD + d] = o;
      if (d == 0) {
        p.partial_ml[slot * 2] = mx;
        p.partial_ml[slot * 2 + 1] = sum;
      }
    }
  }
  static_assert(!kLora || kWarps >= 2, "o_s[1] holds r's columns");
  if (!direct) {
    if (p.counters == nullptr) return;
    // The last of the `active` blocks of this (token, KV head chunk) merges their partials.
    __shared__ bool last;
    __threadfence();  // this block's partials are visible before its arrival is counted
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned* counter = p.counters + int64_t{t} * gridDim.y + blockIdx.y;
      last = atomicAdd(counter, 1u) + 1u == static_cast<unsigned>(active);
      if (last) *counter = 0u;  // ready for the next launch
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    merge_split_partials<T, HD, kWarps, kLora>(p, t, head0, gc, active, o_s);
  }
  // kLora: the block holding the chunk's outputs (direct, or the merging one) takes its shares;
  // one call site, so its code is in the kernel once.
  if constexpr (kLora) {
    __syncthreads();
    attn_lora_finish<T, kWarps, GC * HD>(p.lora, t, int64_t{p.num_heads} * HD, int64_t{head0} * HD,
                                         gc * HD, &o_s[0][0][0], &o_s[1][0][0]);
  }
}

// What a split-KV block works on (split_block): query token t, its KV head, the GC query heads
// from head0 (gc of them real), key partition `part` of psize keys, [first, p_end) its keys.
struct SplitBlock {
  int t, kv_head, head0, gc, part, psize, p_begin, p_end, first;
  QueryView qv;
};
template <int GC>
__device__ __forceinline__ SplitBlock split_block(const SplitParams& p) {
  SplitBlock b;
  b.t = blockIdx.x;
  const int chunks_per_kv = (p.group + GC - 1) / GC;
  b.kv_head = blockIdx.y / chunks_per_kv;
  b.head0 = b.kv_head * p.group + (blockIdx.y % chunks_per_kv) * GC;
  b.gc = min(GC, b.kv_head * p.group + p.group - b.head0);
  b.part = blockIdx.z;
  b.qv = query_view(p, b.t);
  b.psize = partition_size_for(p, b.qv.kv_len);
  b.p_begin = b.part * b.psize;
  b.p_end = min(b.qv.kv_len, b.p_begin + b.psize);
  b.first = max(b.p_begin, b.qv.key_begin);
  return b;
}

// p.prefetch_kv: every K and V row of the block's keys sent toward L2 (before the PDL wait: a
// hint into the point of coherence, so a row the previous kernel writes is read fresh after it).
template <typename TC, int HD, int kThreads>
__device__ __forceinline__ void prefetch_block_rows(const SplitParams& p, const SplitBlock& b) {
  if (!p.prefetch_kv) return;
  constexpr int kRowBytes = HD * static_cast<int>(sizeof(TC));
  for (int key = b.first + static_cast<int>(threadIdx.x); key < b.p_end; key += kThreads) {
    const int64_t r = key_row(p, b.qv, key, b.kv_head, HD);
    const auto* k_row = reinterpret_cast<const char*>(static_cast<const TC*>(p.k_cache) + r);
    const auto* v_row = reinterpret_cast<const char*>(static_cast<const TC*>(p.v_cache) + r);
#pragma unroll
    for (int c = 0; c < kRowBytes; c += 128) {
      prefetch_l2(k_row + c);
      prefetch_l2(v_row + c);
    }
    prefetch_l2(k_row + kRowBytes - 1);  // a row that straddles one more line
    prefetch_l2(v_row + kRowBytes - 1);
  }
}

// The block's query heads into q_s, pre-scaled (log2 units); the heads past gc are zero.
template <typename T, int HD, int GC, int kThreads>
__device__ __forceinline__ void stage_q(const SplitParams& p, const SplitBlock& b,
                                        float (&q_s)[GC][HD]) {
  const int64_t qkv_stride = int64_t{p.num_heads + 2 * p.num_kv_heads} * HD;
  const T* q = static_cast<const T*>(p.qkv) + b.t * qkv_stride + int64_t{b.head0} * HD;
  for (int i = static_cast<int>(threadIdx.x); i < GC * HD; i += kThreads)
    q_s[i / HD][i % HD] = i / HD < b.gc ? to_f32(q[i]) * p.scale_log2 : 0.0f;
}

// s[g] += q_s[g] . (the key's 16-byte vectors c0 .. c0 + N - 1 in raw).
template <typename TC, int HD, int GC, int N>
__device__ __forceinline__ void add_key_scores(float (&s)[GC], const uint4 (&raw)[N], int c0,
                                               const float (&q_s)[GC][HD]) {
  constexpr int kV = kVec16<TC>;
#pragma unroll
  for (int b = 0; b < N; ++b) {
    const TC* e = reinterpret_cast<const TC*>(&raw[b]);
#pragma unroll
    for (int g = 0; g < GC; ++g)
#pragma unroll
      for (int i = 0; i < kV; ++i) s[g] += q_s[g][(c0 + b) * kV + i] * kv_to_f32(e[i]);
  }
}

// The online softmax's start: no keys seen (m = -inf, l = 0, acc = 0).
template <int GC, int kSlice>
__device__ __forceinline__ void softmax_start(float (&m)[GC], float (&l)[GC],
                                              float (&acc)[GC][kSlice]) {
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < kSlice; ++i) acc[g][i] = 0.0f;
  }
}

// One chunk's online-softmax update: the lane's key scores s (valid: it has a key) against the
// warp's running max m and sum l; acc rescaled; each lane's probabilities into p_row.
template <int GC, int kSlice>
__device__ __forceinline__ void softmax_chunk(const SplitParams& p, const float (&s)[GC],
                                              bool valid, float (&m)[GC], float (&l)[GC],
                                              float (&acc)[GC][kSlice], float (&p_row)[GC]) {
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    const float sg = valid ? softcap_log2(s[g], p.softcap_log2) : -INFINITY;
    const float m_new = fmaxf(m[g], warp_max(sg));
    const float ref = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = exp2f(m[g] - ref);
    const float pg = exp2f(sg - ref);
    l[g] = l[g] * alpha + warp_sum(pg);
#pragma unroll
    for (int i = 0; i < kSlice; ++i) acc[g][i] *= alpha;
    m[g] = m_new;
    p_row[g] = pg;
  }
}

// grid (T, Hkv * head_chunks, P); GC query heads per block; HD head_dim; kWarps warps.
// kGroup: keys per batch of value loads in P·V. kPrefetch: the first value batch is issued
// with the key loads, and each chunk's block-table read one chunk ahead. TC: the cache's
// element, T or E4M3 bytes (uint8_t; its scales are in p.scale_log2 and p.v_scale).
template <typename T, int HD, int GC, int kWarps, int kGroup, bool kPrefetch, typename TC = T>
__global__ void __launch_bounds__(kWarps * 32) split_kv_kernel(SplitParams p) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kVd = HD / 32;  // head_dim elements per lane in P·V
  constexpr int kV = kVec16<TC>;
  __shared__ __align__(16) float q_s[GC][HD];
  __shared__ float p_s[kWarps][32][GC];

  // Before pdl_wait() (programmatic dependent launch: the kernel before this one, which writes q
  // and this step's K/V rows, may still run) only the step's metadata is read, copied to the
  // device before the step's first kernel, and the cache rows are prefetched into L2.
  const SplitBlock blk = split_block<GC>(p);
  const QueryView& qv = blk.qv;
  const int p_end = blk.p_end, first = blk.first, kv_head = blk.kv_head;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const auto row_of = [&](int key) { return key < p_end ? key_row(p, qv, key, kv_head, HD) : 0; };
  prefetch_block_rows<TC, HD, kThreads>(p, blk);
  pdl_wait();
  if (p.trigger_early) pdl_trigger();
  if (blk.p_begin >= qv.kv_len) return;  // this partition is past the query's keys (uniform)
  int64_t next_row = kPrefetch ? row_of(first + warp * 32 + lane) : 0;
  stage_q<T, HD, GC, kThreads>(p, blk, q_s);
  __syncthreads();

  const TC* k_cache = static_cast<const TC*>(p.k_cache);
  const TC* v_cache = static_cast<const TC*>(p.v_cache);
  float m[GC], l[GC], acc[GC][kVd];
  softmax_start(m, l, acc);

  // Value rows are read kGroup keys at a time (lane: its head_dim slice of each key).
  for (int base = first + warp * 32; base < p_end; base += kWarps * 32) {
    const int key = base + lane;
    const bool valid = key < p_end;
    int64_t row;
    if constexpr (kPrefetch) {
      row = next_row;
      next_row = row_of(key + kWarps * 32);  // the next chunk's block-table read, early
    } else {
      row = row_of(key);
    }
    const int n = min(32, p_end - base);
    float vf[kGroup][kVd];
    const auto load_values = [&](int j0) {
#pragma unroll
      for (int u = 0; u < kGroup; ++u) {
        const int64_t vrow = __shfl_sync(0xffffffffu, row, j0 + u);
#pragma unroll
        for (int i = 0; i < kVd; ++i)
          vf[u][i] = j0 + u < n ? kv_to_f32(v_cache[vrow + lane * kVd + i]) : 0.0f;
      }
    };
    if constexpr (kPrefetch) load_values(0);
    float s[GC];
#pragma unroll
    for (int g = 0; g < GC; ++g) s[g] = 0.0f;
    if (valid) {
      // The key row in batches of 16-byte loads issued before their FMAs.
      constexpr int kChunks = HD / kV;
      constexpr int kBatch = kChunks % 8 == 0 ? 8 : (kChunks % 4 == 0 ? 4 : 2);
#pragma unroll
      for (int c0 = 0; c0 < kChunks; c0 += kBatch) {
        uint4 raw[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b)
          raw[b] = *reinterpret_cast<const uint4*>(k_cache + row + (c0 + b) * kV);
        add_key_scores<TC, HD, GC>(s, raw, c0, q_s);
      }
    }
    softmax_chunk<GC, kVd>(p, s, valid, m, l, acc, p_s[warp][lane]);
    __syncwarp();
    for (int j0 = 0; j0 < n; j0 += kGroup) {
      if (j0 > 0 || !kPrefetch) load_values(j0);
#pragma unroll
      for (int u = 0; u < kGroup; ++u) {
#pragma unroll
        for (int g = 0; g < GC; ++g) {
          const float pj = p_s[warp][j0 + u][g];
#pragma unroll
          for (int i = 0; i < kVd; ++i) acc[g][i] += pj * vf[u][i];
        }
      }
    }
    __syncwarp();
  }

  if constexpr (!std::is_same_v<TC, T>) {  // E4M3 values: the block's sums times v_scale
#pragma unroll
    for (int g = 0; g < GC; ++g)
#pragma unroll
      for (int i = 0; i < kVd; ++i) acc[g][i] *= p.v_scale;
  }
  finish_split_block<T, HD, GC, kWarps>(p, qv, blk.t, blk.head0, blk.gc, blk.part, blk.psize, m, l,
                                        acc);
}

// The latency-lean decode form (IB_ATTN_LEAN; 2-byte caches of T, head_dim 64 or 128): the same
// blocks and online softmax with fewer dependent memory round trips. The block-table reads of
// each warp's first chunk go out before the PDL wait (step metadata); after it the chunk's key
// rows go out together with q's loads, all 16-byte vectors of a row at once; the value rows
// of the chunk's 32 keys go out at once too, as 16-byte vectors: kRowLanes lanes per row, 32 /
// kRowLanes keys per pass, each lane summing its keys' share of its 8 head_dim values, the lane
// groups added once at the end. The compiler holds the value loads with the key loads (they
// depend on the rows only), 104-211 registers (bench/results/h200/attn-lean/ptxas_local.txt):
// one block of 8 warps or two of 4 per SM.
// kLora: with p.lora's shares (finish_split_block), its A columns sent toward L2 before the wait.
template <typename T, int HD, int GC, int kWarps, bool kLora = false>
__global__ void __launch_bounds__(kWarps * 32) split_kv_lean_kernel(SplitParams p) {
  static_assert(sizeof(T) == 2 && (HD == 64 || HD == 128), "2-byte values, head_dim 64 or 128");
  constexpr int kThreads = kWarps * 32;
  constexpr int kV = kVec16<T>;          // 8 values per 16-byte vector
  constexpr int kChunks = HD / kV;       // vectors per K or V row
  constexpr int kRowLanes = kChunks;     // lanes per value row in P·V
  constexpr int kPass = 32 / kRowLanes;  // keys per pass of a warp's value loads
  __shared__ __align__(16) float q_s[GC][HD];
  __shared__ float p_s[kWarps][32][GC];

  const SplitBlock blk = split_block<GC>(p);
  const QueryView& qv = blk.qv;
  const int p_end = blk.p_end, kv_head = blk.kv_head;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const auto row_of = [&](int key) { return key < p_end ? key_row(p, qv, key, kv_head, HD) : 0; };
  prefetch_block_rows<T, HD, kThreads>(p, blk);
  int base = blk.first + warp * 32;
  int64_t row = row_of(base + lane);  // block tables: step metadata, read before the wait
  if constexpr (kLora) {
    if (blk.part == 0) {
      attn_lora_prefetch<T, kThreads>(p.lora, blk.t, int64_t{p.num_heads} * HD,
                                      int64_t{blk.head0} * HD, blk.gc * HD);
    }
  }
  pdl_wait();
  if (p.trigger_early) pdl_trigger();
  if (blk.p_begin >= qv.kv_len) return;  // this partition is past the query's keys (uniform)

  const T* k_cache = static_cast<const T*>(p.k_cache);
  const T* v_cache = static_cast<const T*>(p.v_cache);
  // The lane's key row (row_of: row 0 past the keys, read and never used), every vector at once.
  uint4 kraw[kChunks];
  const auto load_keys = [&] {
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
      kraw[c] = *reinterpret_cast<const uint4*>(k_cache + row + c * kV);
  };
  if (base < p_end) load_keys();  // in flight with q's loads
  stage_q<T, HD, GC, kThreads>(p, blk, q_s);
  __syncthreads();

  float m[GC], l[GC], acc[GC][kV];
  softmax_start(m, l, acc);
  const int sub = lane / kRowLanes;        // this lane's keys in a pass: sub, sub + kPass, ...
  const int d0 = (lane % kRowLanes) * kV;  // and its 8 head_dim values of each
  while (base < p_end) {
    const bool valid = base + lane < p_end;
    const int n = min(32, p_end - base);
    float s[GC];
#pragma unroll
    for (int g = 0; g < GC; ++g) s[g] = 0.0f;
    if (valid) add_key_scores<T, HD, GC>(s, kraw, 0, q_s);
    softmax_chunk<GC, kV>(p, s, valid, m, l, acc, p_s[warp][lane]);
    uint4 vraw[kRowLanes];
#pragma unroll
    for (int j = 0; j < kRowLanes; ++j) {
      const int key = j * kPass + sub;
      const int64_t vrow = __shfl_sync(0xffffffffu, row, key);
      vraw[j] = key < n ? *reinterpret_cast<const uint4*>(v_cache + vrow + d0) : uint4{};
    }
    __syncwarp();
#pragma unroll
    for (int j = 0; j < kRowLanes; ++j) {
      const T* e = reinterpret_cast<const T*>(&vraw[j]);
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        const float pj = p_s[warp][j * kPass + sub][g];
#pragma unroll
        for (int i = 0; i < kV; ++i) acc[g][i] += pj * to_f32(e[i]);
      }
    }
    __syncwarp();
    // The warp's next chunk (contexts past kWarps * 32 keys).
    base += kWarps * 32;
    if (base < p_end) {
      row = row_of(base + lane);
      load_keys();
    }
  }
  // The kPass lane groups' sums of each head_dim value added (every lane gets the total).
#pragma unroll
  for (int g = 0; g < GC; ++g)
#pragma unroll
    for (int i = 0; i < kV; ++i)
#pragma unroll
      for (int off = kRowLanes; off < 32; off <<= 1)
        acc[g][i] += __shfl_xor_sync(0xffffffffu, acc[g][i], off);
  finish_split_block<T, HD, GC, kWarps, kV, kLora>(p, qv, blk.t, blk.head0, blk.gc, blk.part,
                                                   blk.psize, m, l, acc);
}

// grid (T, Hq), HD threads: combines the partitions of one (token, head).
template <typename T, int HD>
__global__ void __launch_bounds__(HD) merge_kernel(SplitParams p) {
  const int t = blockIdx.x;
  const int head = blockIdx.y;
  const int d = threadIdx.x;
  const QueryView qv = query_view(p, t);
  const int psize = partition_size_for(p, qv.kv_len);
  const int parts = (qv.kv_len + psize - 1) / psize;
  const int64_t slot0 = (int64_t{t} * p.num_heads + head) * p.num_partitions;
  float mx = -INFINITY;
  for (int i = 0; i < parts; ++i) mx = fmaxf(mx, p.partial_ml[(slot0 + i) * 2]);
  const float ref = mx == -INFINITY ? 0.0f : mx;
  float sum = 0.0f, o = 0.0f;
  for (int i = 0; i < parts; ++i) {
    const float f = exp2f(p.partial_ml[(slot0 + i) * 2] - ref);
    sum += p.partial_ml[(slot0 + i) * 2 + 1] * f;
    o += p.partial_o[(slot0 + i) * HD + d] * f;
  }
  T* out = static_cast<T*>(p.out) + (int64_t{t} * p.num_heads + head) * HD;
  out[d] = from_f32<T>(sum > 0.0f ? o / sum : 0.0f);
}

// The kernel parameters for a batch; partials point into workspace when there are several
// partitions (the caller checks it is large enough). partition_size (split_kv_partition_size's)
// only sets how many partitions the grid has; each query sizes its own (partition_size_for).
inline SplitParams make_split_params(const Tensor& qkv, const KvCacheLayer& kv,
                                     const AttentionMetadata& meta, const AttentionShape& shape,
                                     int partition_size, void* workspace, size_t workspace_bytes,
                                     Tensor out, unsigned* counters = nullptr,
                                     bool prefetch_kv = false) {
  SplitParams p{};
  static_cast<PagedAttentionParams&>(p) = paged_attention_params(qkv, kv, meta, shape, out);
  p.counters = counters;
  p.trigger_early = 1;
  p.prefetch_kv = prefetch_kv ? 1 : 0;
  const int max_ctx = meta.max_context_len > 1 ? meta.max_context_len : 1;
  p.num_partitions = (max_ctx + partition_size - 1) / partition_size;
  if (p.num_partitions > 1 && workspace_bytes > 0) {
    p.partial_o = static_cast<float*>(workspace);
    p.partial_ml = p.partial_o + static_cast<size_t>(meta.num_tokens) * shape.num_heads *
                                     p.num_partitions * shape.head_dim;
  }
  return p;
}

inline dim3 split_kv_grid(const SplitParams& p, int tokens, int gc) {
  const int chunks = (p.group + gc - 1) / gc;
  return dim3(static_cast<unsigned>(tokens), static_cast<unsigned>(p.num_kv_heads * chunks),
              static_cast<unsigned>(p.num_partitions));
}
inline dim3 merge_grid(const SplitParams& p, int tokens) {
  return dim3(static_cast<unsigned>(tokens), static_cast<unsigned>(p.num_heads));
}

}  // namespace ib::cuda
