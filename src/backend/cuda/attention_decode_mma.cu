// Decode attention on tensor cores for large batches (IB_ATTN_MMA): steps where every sequence
// has one query token. A block takes one (sequence, KV head) item, or with IB_ATTN_MMA_PERSIST=N
// (N blocks an SM) several in turn as one stream of tiles: its GQA group's query heads are the
// rows of an m16n8k16 MMA (up to 16; the rest zero), so each K/V row is read once for the group.
// K and V tiles of 64 keys are gathered from the cache blocks (a power-of-two size: a shift and a
// mask) by cp.async into a two-stage ring by all 4 warps; each warp takes 16 keys of every tile
// (S = Q K^T, then O += P V on the MMAs) with an online softmax of its own, and the warps' states
// merge in shared memory at the item's end. The split-KV kernel (attention_split_kv.cu) computes
// the same on CUDA cores, a lane per key. Sliding windows and soft-capped logits are applied per
// key. An E4M3 cache (TC = uint8_t) comes in by cp.async as bytes, a ring of two stages of half
// the size, and each tile is converted (exact) into one K/V stage before the warps read it;
// k_scale is in the softmax scale, v_scale in the output. For a bf16 model the conversion is to
// fp16 and the block's MMAs run in fp16 (IB_ATTN_E4M3_F16=1, the default: one paired conversion
// for two values, where bf16 takes it and three more): Q converted once (clamped to fp16's
// range), P in fp16, the output accumulated in f32. Block-sparse patterns and head_dim 256 keep
// the split-KV kernel. (Measured and removed, bench/NOTES.md session 37: a bulk L2 prefetch of
// each block's later cache blocks, and a third stage of E4M3 bytes.)
#include <cmath>
#include <type_traits>

#include "backend/cuda/detail/attention_common.cuh"
#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/mma.cuh"
#include "backend/cuda/detail/mma_attention.cuh"

namespace ib::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 16;                    // the MMA's rows: the query heads of one KV head
constexpr int kBlockK = 64;                  // keys per tile
constexpr int kWarpKeys = kBlockK / kWarps;  // 16: one k16 step of P V
// (no sparse pattern; k_scale and v_scale are 1 unless the cache is E4M3)
using DecodeParams = PagedAttentionParams;

// TC: the cache's element, T or uint8_t (E4M3).
template <typename TC>
constexpr bool kE4m3 = std::is_same_v<TC, uint8_t>;
// The T rows after Q: two stages of K and V (a stage's K rows, then its V rows); an E4M3 cache,
// one stage (its bytes come through a ring of two stages of half the size).
template <typename TC>
constexpr int kTRows = kE4m3<TC> ? 2 * kBlockK : 4 * kBlockK;

template <typename TC, int HD>
constexpr size_t smem_bytes() {
  // Q (16 rows), the T rows, then for E4M3 the bytes' ring (K and V, 2 stages of 64 rows of HD
  // bytes).
  return static_cast<size_t>(kRows + kTRows<TC>) * attention_pitch<HD>() * 2 +
         (kE4m3<TC> ? 4 * kBlockK * HD : 0);
}
// The warps' states meeting at an item's end, in the stage of T rows its last tile used.
template <int HD>
constexpr size_t merge_bytes() {
  return static_cast<size_t>(kWarps) * kRows * (HD + 2) * sizeof(float);
}

// One (sequence, KV head) of the launch: item i is sequence i / Hkv, KV head i % Hkv.
struct Item {
  int seq, kv_head, q_begin, pos, kv_begin, tile_begin, tile_end;
};
// The first item from i on (in steps of `step`) with one query token and a visible key, or
// index >= n (none left). Padded sequences have no query token.
__device__ __forceinline__ int next_item(const DecodeParams& p, int i, int step, int n,
                                         Item& item) {
  for (; i < n; i += step) {
    const int seq = i / p.num_kv_heads;
    const int q_begin = p.batch.query_start[seq];
    const int pos = p.batch.context_lens[seq] - 1;  // the query's position: keys [0, pos]
    if (p.batch.query_start[seq + 1] - q_begin != 1 || pos < 0) continue;
    const int kv_begin = p.window > 0 ? max(0, pos - p.window + 1) : 0;
    item = {seq, i % p.num_kv_heads, q_begin, pos, kv_begin, kv_begin / kBlockK, pos / kBlockK + 1};
    return i;
  }
  return n;
}

// The kernels' body (below); a 1-D grid of G blocks, dynamic shared memory smem_bytes<TC, HD>().
// Block b takes the items b, b + G, ... in turn as one stream of tiles through the ring: the next
// item's first tile (and its Q, once this item's Q is in registers) loads during this item's last
// tile and merge. G = the items: a block each, as before. TM: the MMAs' element, T but for a bf16
// model's E4M3 cache under IB_ATTN_E4M3_F16 (fp16).
template <typename T, typename TC, int HD, typename TM = T>
__device__ __forceinline__ void decode_mma(const DecodeParams& p) {
  static_assert(std::is_same_v<TM, T> || (kE4m3<TC> && std::is_same_v<TM, __half>),
                "fp16 MMAs for another T over an E4M3 cache only");
  constexpr int kP = attention_pitch<HD>();
  constexpr bool kFp8 = kE4m3<TC>;
  static_assert(merge_bytes<HD>() <= size_t{2} * kBlockK * kP * 2, "the merge fits a K/V stage");
  extern __shared__ uint4 smem_raw[];
  // q_s (kRows, kP), then the stages of T rows (K rows, V rows; pitch kP): 2, or 1 for an E4M3
  // cache, whose bytes k8_s and v8_s (2, kBlockK, HD) follow.
  T* const q_s = reinterpret_cast<T*>(smem_raw);
  TM* const t_s = reinterpret_cast<TM*>(q_s + kRows * kP);
  [[maybe_unused]] uint8_t* const k8_s = reinterpret_cast<uint8_t*>(t_s + kTRows<TC> * kP);
  [[maybe_unused]] uint8_t* const v8_s = k8_s + 2 * kBlockK * HD;
  const auto k_stage = [&](int stage) { return t_s + stage * 2 * kBlockK * kP; };
  const auto v_stage = [&](int stage) { return k_stage(stage) + kBlockK * kP; };

  const int n_items = p.batch.num_seqs * p.num_kv_heads;
  const int step = static_cast<int>(gridDim.x);
  Item cur;
  int cur_i = next_item(p, static_cast<int>(blockIdx.x), step, n_items, cur);
  if (cur_i >= n_items) return;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int group = p.group;
  const int64_t qkv_stride = int64_t{p.num_heads + 2 * p.num_kv_heads} * HD;
  const TC* k_cache = static_cast<const TC*>(p.k_cache);
  const TC* v_cache = static_cast<const TC*>(p.v_cache);
  // The cache (num_blocks, Hkv, block_size, HD): a power-of-two block size (the launcher's
  // condition), so a key's block and offset are a shift and a mask.
  const int bs = p.batch.block_size;
  const int block_shift = __ffs(bs) - 1;
  const int64_t block_stride = int64_t{p.num_kv_heads} * bs * HD;  // elements a cache block

  // The group's query heads are adjacent in the qkv row: rows past the group are zero.
  const auto load_q = [&](const Item& it) {
    const T* q_src = static_cast<const T*>(p.qkv) + int64_t{it.q_begin} * qkv_stride +
                     int64_t{it.kv_head} * group * HD;
    cp_async_rows<T, HD, kThreads>(q_s, kP, kRows, q_src, HD, group);
  };
  // Keys before the window are masked too: zero-filled rather than read (a block behind the
  // window may be freed and hold anything); E4M3's zero byte is +0.
  const auto load_kv = [&](const Item& it, int tile, int buf) {
    const int32_t* table = p.batch.block_tables + int64_t{it.seq} * p.batch.max_blocks_per_seq;
    const int64_t head = int64_t{it.kv_head} * bs * HD;
    const int key0 = tile * kBlockK;
    // 16 bytes of row r at element c into the stage: a row's elements (HD of TC, HD bytes for
    // E4M3) then the next row's, at a pitch of kP for T rows.
    constexpr int kElems = 16 / static_cast<int>(sizeof(TC));  // elements a chunk
    constexpr int kPitch = kFp8 ? HD : kP;
    TC* kd = kFp8 ? reinterpret_cast<TC*>(k8_s + buf * kBlockK * HD)
                  : reinterpret_cast<TC*>(k_stage(buf));
    TC* vd = kFp8 ? reinterpret_cast<TC*>(v8_s + buf * kBlockK * HD)
                  : reinterpret_cast<TC*>(v_stage(buf));
    for_tile_chunks<kBlockK, HD / kElems, kThreads>([&](int r, int chunk) {
      const int key = key0 + r;
      const bool valid = key >= it.kv_begin && key <= it.pos;
      const int c = chunk * kElems;
      const int64_t row = valid ? int64_t{table[key >> block_shift]} * block_stride + head +
                                      int64_t{key & (bs - 1)} * HD
                                : 0;
      cp_async16(kd + r * kPitch + c, k_cache + row + c, valid);
      cp_async16(vd + r * kPitch + c, v_cache + row + c, valid);
    });
  };
  // A stage's E4M3 bytes (src, kBlockK rows of HD) as TM into dst (rows of pitch kP), 8 values a
  // thread and step (8-byte reads and 16-byte writes, consecutive across the warp).
  [[maybe_unused]] const auto convert = [&](const uint8_t* src, TM* dst) {
    for_tile_chunks<kBlockK, HD / 8, kThreads>([&](int r, int chunk) {
      const int c = chunk * 8;
      *reinterpret_cast<uint4*>(dst + r * kP + c) =
          e4m3x8_to<TM>(*reinterpret_cast<const uint2*>(src + r * HD + c));
    });
  };
  // Q's rows as TM, in place, when the MMAs take another element than T (8 values a thread and
  // step; the next barrier publishes them). Every Q row has arrived: the caller has waited for
  // its group and passed a barrier.
  const auto convert_q = [&] {
    if constexpr (!std::is_same_v<TM, T>) {
      for (int i = threadIdx.x; i < kRows * (HD / 8); i += kThreads) {
        auto* cell = reinterpret_cast<uint4*>(q_s + (i / (HD / 8)) * kP + (i % (HD / 8)) * 8);
        *cell = convert8_to_f16<T>(*cell);
      }
    }
  };

  // Lane holds rows g = lane / 4 and g + 8 (query heads), keys tq * 2 (+ 1) of each 8.
  const int g = lane >> 2;
  const int tq = lane & 3;
  uint32_t qf[HD / 16][4];
  float o[HD / 8][4];
  float m[2], l[2];  // each row's running max, and this lane's part of its sum
  const auto reset = [&] {
#pragma unroll
    for (int i = 0; i < HD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
  };
  reset();
  // The warps' states (max, sum, unnormalised output per row) meet in the K/V stage `stage`
  // (free once every warp has passed the barrier after its last tile); a warp that saw no key
  // holds -inf, 0, 0. Ends on a barrier: the stage may be refilled after it.
  const auto merge = [&](const Item& it, int stage) {
    auto* o_s = reinterpret_cast<float*>(k_stage(stage));  // (kWarps, kRows, HD)
    float* m_s = o_s + kWarps * kRows * HD;                // (kWarps, kRows)
    float* l_s = m_s + kWarps * kRows;                     // (kWarps, kRows)
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      const float sum = mma_row_sum(l[ri]);
      const int row = g + ri * 8;
      if (tq == 0) {
        m_s[warp * kRows + row] = m[ri];
        l_s[warp * kRows + row] = sum;
      }
      float* dst = o_s + (warp * kRows + row) * HD + tq * 2;
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt) {
        dst[dt * 8] = o[dt][ri * 2];
        dst[dt * 8 + 1] = o[dt][ri * 2 + 1];
      }
    }
    __syncthreads();
    T* out = static_cast<T*>(p.out) + int64_t{it.q_begin} * p.num_heads * HD +
             int64_t{it.kv_head} * group * HD;
    for (int i = threadIdx.x; i < group * HD; i += kThreads) {
      const int row = i / HD;
      const int d = i % HD;
      float mx = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, m_s[w * kRows + row]);
      const float ref = mx == -INFINITY ? 0.0f : mx;
      float sum = 0.0f, acc = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = exp2f(m_s[w * kRows + row] - ref);
        sum += l_s[w * kRows + row] * f;
        acc += o_s[(w * kRows + row) * HD + d] * f;
      }
      out[int64_t{row} * HD + d] = from_f32<T>(sum > 0.0f ? acc / sum * p.v_scale : 0.0f);
    }
    __syncthreads();
  };

  // The stream: (cur, tile) in ring stage buf; (nxt, next_tile) the tile after it, nxt_i >=
  // n_items when none.
  load_q(cur);
  int tile = cur.tile_begin;
  load_kv(cur, tile, 0);
  cp_async_commit();
  Item nxt = cur;
  int nxt_i = cur_i;
  int next_tile = tile + 1;
  if (next_tile == cur.tile_end) {
    nxt_i = next_item(p, cur_i + step, step, n_items, nxt);
    next_tile = nxt_i < n_items ? nxt.tile_begin : 0;
  }
  bool first = true;  // tile is cur's first: its Q comes into registers
  for (int buf = 0;; buf ^= 1) {
    const bool has_next = nxt_i < n_items;
    ring2_wait(has_next, [&] { load_kv(nxt, next_tile, buf ^ 1); });
    if constexpr (kFp8) {
      if (first) convert_q();
      convert(k8_s + buf * kBlockK * HD, k_stage(0));
      convert(v8_s + buf * kBlockK * HD, v_stage(0));
      __syncthreads();
    }
    const int stage = kFp8 ? 0 : buf;  // the K/V stage of T rows the warps read
    if (first) {
      const TM* q_warp = reinterpret_cast<const TM*>(q_s) + (lane & 15) * kP + (lane >> 4) * 8;
#pragma unroll
      for (int ks = 0; ks < HD / 16; ++ks) ldmatrix_x4(qf[ks], q_warp + ks * 16);
    }
    const int key0 = tile * kBlockK + warp * kWarpKeys;  // this warp's 16 keys
    if (key0 <= cur.pos && key0 + kWarpKeys - 1 >= cur.kv_begin) {
      const TM* kt = k_stage(stage) + warp * kWarpKeys * kP;
      const TM* vt = v_stage(stage) + warp * kWarpKeys * kP;
      // S = Q K^T over the warp's 16 keys, masked, and the online softmax's step (s: P after).
      float s[2][4] = {};
#pragma unroll
      for (int ks = 0; ks < HD / 16; ++ks)
        mma_scores16<TM>(qf[ks], kt + ks * 16, kP, lane, s[0], s[1]);
      // Every row sees the same keys, [kv_begin, pos]: s[nt][2 ri + e] is key nt * 8 + tq * 2 +
      // e. Soft-capping (Gemma-2) in a loop of its own: the common one is a multiply and a select.
      const auto mask = [&](auto capped) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int key = key0 + (i >> 2) * 8 + tq * 2 + (i & 1);
          float& v = s[i >> 2][i & 3];
          const float x = v * p.scale_log2;
          const bool seen = key <= cur.pos && key >= cur.kv_begin;
          if constexpr (decltype(capped)::value) {
            v = seen ? softcap_log2(x, p.softcap_log2) : -INFINITY;
          } else {
            v = seen ? x : -INFINITY;
          }
        }
      };
      if (p.softcap_log2 > 0.0f) {
        mask(std::true_type{});
      } else {
        mask(std::false_type{});
      }
      mma_softmax_step(s, m, l, o);
      // O += P V over the warp's 16 keys.
      mma_pv16<TM>(s[0], s[1], vt, kP, lane, o);
    }
    __syncthreads();  // every warp is done with this stage (and with Q's rows, when first)
    const bool item_done = tile + 1 == cur.tile_end;
    if (item_done) {
      merge(cur, stage);
      reset();
    }
    if (!has_next) break;
    // The next item's Q into q_s (this item's is in registers), completed by the next wait.
    if (nxt_i != cur_i) {
      load_q(nxt);
      cp_async_commit();
    }
    first = nxt_i != cur_i;
    cur = nxt;
    cur_i = nxt_i;
    tile = next_tile;
    if (++next_tile == nxt.tile_end) {
      nxt_i = next_item(p, nxt_i + step, step, n_items, nxt);
      next_tile = nxt_i < n_items ? nxt.tile_begin : 0;
    }
  }
}

// A cache of T; and an E4M3 one, whose conversion needs more registers than the 128 ptxas picks
// for the first: 3 blocks an SM, as shared memory allows anyway.
template <typename T, int HD>
__global__ void __launch_bounds__(kThreads) decode_mma_kernel(DecodeParams p) {
  decode_mma<T, T, HD>(p);
}
template <typename T, int HD, typename TM>
__global__ void __launch_bounds__(kThreads, 3) decode_mma_e4m3_kernel(DecodeParams p) {
  decode_mma<T, uint8_t, HD, TM>(p);
}

template <typename T, typename TC, int HD, typename TM>
void launch_typed(const DecodeParams& p, int blocks, cudaStream_t stream) {
  constexpr size_t kSmem = smem_bytes<TC, HD>();
  const auto kernel = kE4m3<TC> ? decode_mma_e4m3_kernel<T, HD, TM> : decode_mma_kernel<T, HD>;
  IB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kSmem)),
                "attention(decode mma)");
  kernel<<<static_cast<unsigned>(blocks), kThreads, kSmem, stream>>>(p);
}

}  // namespace

bool decode_mma_supports(DType dtype, const KvCacheLayer& kv, const AttentionShape& shape) {
  const int hd = shape.head_dim;
  return (dtype == DType::kBF16 || dtype == DType::kF16) &&
         (kv.k.dtype == dtype || kv.k.dtype == DType::kF8E4M3) && kv.v.dtype == kv.k.dtype &&
         (hd == 64 || hd == 96 || hd == 128) && shape.num_kv_heads > 0 && kv.block_size > 0 &&
         (kv.block_size & (kv.block_size - 1)) == 0 && shape.num_heads % shape.num_kv_heads == 0 &&
         shape.num_heads / shape.num_kv_heads <= kRows && !shape.block_sparse.enabled();
}

void launch_attention_decode_mma(const Tensor& qkv, const KvCacheLayer& kv,
                                 const AttentionMetadata& meta, const AttentionShape& shape,
                                 Tensor out, cudaStream_t stream, bool e4m3_f16, int max_blocks) {
  IB_ASSERT(decode_mma_supports(qkv.dtype, kv, shape) && meta.max_query_len == 1,
            "attention(decode mma): decode steps of bf16 / fp16 activations (cache of theirs or "
            "E4M3), head_dim 64-128, groups of at most 16, no block-sparse pattern");
  IB_ASSERT(
      aligned16(qkv.data) && aligned16(kv.k.data) && aligned16(kv.v.data) && aligned16(out.data),
      "attention(decode mma): tensors must be 16-byte aligned");
  if (meta.num_tokens == 0 || meta.num_seqs == 0) return;
  const DecodeParams p = paged_attention_params(qkv, kv, meta, shape, out);
  const int64_t items = int64_t{meta.num_seqs} * shape.num_kv_heads;
  IB_ASSERT(items <= int64_t{1} << 30, "attention(decode mma): too many sequences");
  const int blocks =
      static_cast<int>(max_blocks > 0 ? std::min<int64_t>(items, max_blocks) : items);
  const auto by_dim = [&](auto tag, auto cache_tag, auto mma_tag) {
    using T = decltype(tag);
    using TC = decltype(cache_tag);
    using TM = decltype(mma_tag);
    switch (shape.head_dim) {
      case 64:
        launch_typed<T, TC, 64, TM>(p, blocks, stream);
        break;
      case 96:
        launch_typed<T, TC, 96, TM>(p, blocks, stream);
        break;
      default:
        launch_typed<T, TC, 128, TM>(p, blocks, stream);
        break;
    }
  };
  if (kv.k.dtype != DType::kF8E4M3) {
    if (qkv.dtype == DType::kBF16) {
      by_dim(bf16{}, bf16{}, bf16{});
    } else {
      by_dim(f16{}, f16{}, f16{});
    }
  } else if (qkv.dtype == DType::kF16) {
    by_dim(f16{}, uint8_t{}, f16{});
  } else if (e4m3_f16) {
    by_dim(bf16{}, uint8_t{}, f16{});
  } else {
    by_dim(bf16{}, uint8_t{}, bf16{});
  }
  IB_CUDA_CHECK_LAUNCH("attention(decode mma)");
}

}  // namespace ib::cuda
