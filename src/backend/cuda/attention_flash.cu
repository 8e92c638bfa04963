// Flash attention over the paged cache for prefill and mixed batches (bf16/fp16, tensor cores).
// A block owns 64 query rows of one sequence and one query head (4 warps x 16 rows) and walks
// the visible keys in tiles of 64: K and V tiles are gathered from the cache blocks by cp.async
// into a two-stage shared-memory ring, S = Q K^T and O += P V run on m16n8k16 MMAs with fp32
// accumulation, and the softmax is online (running max and sum per row), so no S x S matrix is
// ever materialised. Causal, sliding-window and block-sparse masks are applied per element; tiles
// a warp cannot see are skipped, and under a block-sparse pattern (backend/block_sparse.h) tiles
// no row of the block sees are not even loaded. An E4M3 cache (TC = uint8_t) is loaded 16 bytes per
// thread and converted to T on its way into shared memory (exact: E4M3 values are bf16 and fp16
// values), its k_scale folded into the softmax scale and its v_scale into the output.
#include <cmath>
#include <type_traits>

#include "backend/cuda/detail/attention_common.cuh"
#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/mma.cuh"
#include "backend/cuda/detail/mma_attention.cuh"
#include "backend/cuda_attention_sizes.h"

namespace ib::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockQ = 64;  // query rows per block
constexpr int kBlockK = 64;  // keys per tile
// The sparse pattern applies on top of the causal mask.
using FlashParams = PagedAttentionParams;

// Under a block-sparse pattern, whether a query in block qb (or a later one) may see a key of
// tile: some block of the tile's keys is strided, or reaches into qb's local band (later queries'
// bands start later, so a tile outside qb's is outside theirs but for its strided blocks).
__device__ __forceinline__ bool sparse_tile_seen(const BlockSparse& b, int tile, int qb) {
  const int kb_lo = tile * kBlockK / b.block_size;
  const int kb_hi = (tile * kBlockK + kBlockK - 1) / b.block_size;
  return kb_hi > qb - b.local_blocks || (kb_hi + 1) / b.vert_stride > kb_lo / b.vert_stride;
}

// The first tile from tile on that a query in block qb0 or later may see (every tile without a
// pattern); tile_end when none is left.
__device__ __forceinline__ int next_seen_tile(const FlashParams& p, int tile, int tile_end,
                                              int qb0) {
  if (!p.sparse.enabled()) return tile;
  while (tile < tile_end && !sparse_tile_seen(p.sparse, tile, qb0)) ++tile;
  return tile;
}

template <int HD>
constexpr size_t smem_bytes() {
  return attention_smem_bytes<HD>(kBlockQ, kBlockK);
}

// The 16 E4M3 values of raw as T, into 16-byte aligned shared memory at dst.
template <typename T>
__device__ __forceinline__ void store_e4m3_as(T* dst, const uint4& raw) {
  *reinterpret_cast<uint4*>(dst) = e4m3x8_to<T>(make_uint2(raw.x, raw.y));
  *reinterpret_cast<uint4*>(dst + 8) = e4m3x8_to<T>(make_uint2(raw.z, raw.w));
}

// grid (q tiles, Hq, num_seqs); dynamic shared memory smem_bytes<HD>(). TC: the cache's element,
// T or uint8_t (E4M3).
template <typename T, typename TC, int HD>
__global__ void __launch_bounds__(kThreads) flash_kernel(FlashParams p) {
  constexpr int kP = attention_pitch<HD>();
  extern __shared__ uint4 smem_raw[];
  // q_s (kBlockQ, kP), then k_s and v_s (2, kBlockK, kP).
  const auto [q_s, k_s, v_s] = attention_tiles<T, HD>(smem_raw, kBlockQ, kBlockK);

  const int seq = blockIdx.z;
  const int head = blockIdx.y;
  const int q_tile = gridDim.x - 1 - blockIdx.x;  // the longest (last) tiles start first
  const int q_begin = p.batch.query_start[seq];
  const int q_len = p.batch.query_start[seq + 1] - q_begin;
  if (q_tile * kBlockQ >= q_len) return;
  const int ctx = p.batch.context_lens[seq];
  const int rows_here = min(kBlockQ, q_len - q_tile * kBlockQ);
  const int qpos_first = ctx - q_len + q_tile * kBlockQ;
  const int kv_end = qpos_first + rows_here;  // keys [0, kv_end) can be visible
  const int kv_begin = p.window > 0 ? max(0, qpos_first - p.window + 1) : 0;
  const int tile_begin = kv_begin / kBlockK;
  const int tile_end = (kv_end + kBlockK - 1) / kBlockK;
  const int kv_head = head / p.group;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;

  const int64_t qkv_stride = int64_t{p.num_heads + 2 * p.num_kv_heads} * HD;
  const T* q_src = static_cast<const T*>(p.qkv) + int64_t{q_begin + q_tile * kBlockQ} * qkv_stride +
                   int64_t{head} * HD;
  cp_async_rows<T, HD, kThreads>(q_s, kP, kBlockQ, q_src, qkv_stride, rows_here);
  const TC* k_cache = static_cast<const TC*>(p.k_cache);
  const TC* v_cache = static_cast<const TC*>(p.v_cache);
  // The sequence's block table row and the KV head's offset once; a key's block by FastDiv.
  const SeqCacheRows rows = seq_cache_rows(p.batch, seq, kv_head, p.num_kv_heads, HD);
  const auto load_kv = [&](int tile, int buf) {
    T* kd = k_s + buf * kBlockK * kP;
    T* vd = v_s + buf * kBlockK * kP;
    const int key0 = tile * kBlockK;
    if constexpr (std::is_same_v<TC, uint8_t>) {  // 16 E4M3 values per thread, converted
      for_tile_chunks<kBlockK, HD / 16, kThreads>([&](int r, int chunk) {
        const int c = chunk * 16;
        // Keys past kv_end read the last visible key's row (no branch) and store zeros.
        const int key = key0 + r;
        const int64_t row = rows.row(min(key, kv_end - 1));
        uint4 kr = *reinterpret_cast<const uint4*>(k_cache + row + c);
        uint4 vr = *reinterpret_cast<const uint4*>(v_cache + row + c);
        if (key >= kv_end) kr = vr = uint4{0, 0, 0, 0};
        store_e4m3_as(kd + r * kP + c, kr);
        store_e4m3_as(vd + r * kP + c, vr);
      });
    } else {
      cp_async_kv<T, HD, kThreads, kBlockK>(kd, vd, kP, k_cache, v_cache, [&](int r) -> int64_t {
        const int key = key0 + r;
        return key < kv_end ? rows.row(key) : -1;
      });
    }
  };
  // Block-sparse: the block's earliest query block decides which tiles are loaded at all.
  const int qb0 = p.sparse.enabled() ? qpos_first / p.sparse.block_size : 0;
  int tile = next_seen_tile(p, tile_begin, tile_end, qb0);  // the block's own tile is always seen
  load_kv(tile, 0);
  cp_async_commit();

  // This warp's 16 query rows: lane holds rows g = lane / 4 and g + 8.
  const int g = lane >> 2;
  const int tq = lane & 3;
  const int wpos0 = qpos_first + warp * 16;  // position of the warp's row 0
  const bool warp_active = warp * 16 < rows_here;
  const bool general = p.window > 0 || p.sparse.enabled() || p.softcap_log2 > 0.0f;
  // The warp's Q fragments stay in registers up to head_dim 128; at 256 (with o's 128 floats a
  // thread) they are read from shared memory for each tile instead.
  constexpr bool kQInRegs = HD <= 128;
  uint32_t qf[kQInRegs ? HD / 16 : 1][4];
  float o[HD / 8][4];
#pragma unroll
  for (int i = 0; i < HD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};

  for (int it = 0; tile < tile_end; ++it) {
    const int buf = it & 1;
    const int next = next_seen_tile(p, tile + 1, tile_end, qb0);
    ring2_wait(next < tile_end, [&] { load_kv(next, buf ^ 1); });
    const T* q_warp = q_s + (warp * 16 + (lane & 15)) * kP + (lane >> 4) * 8;
    if constexpr (kQInRegs) {
      if (it == 0) {
#pragma unroll
        for (int ks = 0; ks < HD / 16; ++ks) ldmatrix_x4(qf[ks], q_warp + ks * 16);
      }
    }
    const int key0 = tile * kBlockK;
    // Skip tiles wholly after this warp's last row or wholly before its first row's window.
    const bool visible =
        warp_active && key0 <= wpos0 + 15 &&
        (p.window <= 0 || key0 + kBlockK - 1 > wpos0 - p.window) &&
        (!p.sparse.enabled() || sparse_tile_seen(p.sparse, tile, wpos0 / p.sparse.block_size));
    if (visible) {
      const T* kt = k_s + buf * kBlockK * kP;
      const T* vt = v_s + buf * kBlockK * kP;
      float s[kBlockK / 8][4];
#pragma unroll
      for (int i = 0; i < kBlockK / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < HD / 16; ++ks) {
        uint32_t a[4];
        if constexpr (kQInRegs) {
          a[0] = qf[ks][0], a[1] = qf[ks][1], a[2] = qf[ks][2], a[3] = qf[ks][3];
        } else {
          ldmatrix_x4(a, q_warp + ks * 16);
        }
#pragma unroll
        for (int np = 0; np < kBlockK / 16; ++np)
          mma_scores16<T>(a, kt + np * 16 * kP + ks * 16, kP, lane, s[2 * np], s[2 * np + 1]);
      }
      // Scale and mask (only tiles crossing the diagonal or a window edge need it) rows g
      // (ri = 0) and g + 8 (ri = 1), then their online softmax. kGeneral: a window, a sparse
      // pattern or soft-capping; without them (most launches) the loop is a multiply and a
      // select an element, not a soft-cap's division and tanh behind a branch in each.
      const auto mask_scores = [&](auto general) {
        constexpr bool kGeneral = decltype(general)::value;
        const bool need_mask =
            key0 + kBlockK - 1 > wpos0 ||
            (kGeneral && ((p.window > 0 && key0 <= wpos0 + 15 - p.window) || p.sparse.enabled()));
#pragma unroll
        for (int ri = 0; ri < 2; ++ri) {
          const int qpos = wpos0 + g + ri * 8;
#pragma unroll
          for (int nt = 0; nt < kBlockK / 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int key = key0 + nt * 8 + tq * 2 + e;
              float& x = s[nt][ri * 2 + e];
              if constexpr (kGeneral) {
                const bool ok = !need_mask ||
                                (key <= qpos && (p.window <= 0 || key > qpos - p.window) &&
                                 (!p.sparse.enabled() || block_sparse_keeps(p.sparse, qpos, key)));
                x = ok ? softcap_log2(x * p.scale_log2, p.softcap_log2) : -INFINITY;
              } else {
                x = !need_mask || key <= qpos ? x * p.scale_log2 : -INFINITY;
              }
            }
          }
        }
      };
      if (general) {
        mask_scores(std::true_type{});
      } else {
        mask_scores(std::false_type{});
      }
      mma_softmax_step(s, m, l, o);
      // O += P V: P's accumulator layout is the A-operand layout of the next MMA.
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk)
        mma_pv16<T>(s[2 * kk], s[2 * kk + 1], vt + kk * 16 * kP, kP, lane, o);
    }
    __syncthreads();  // the next iteration's prefetch overwrites this buffer
    tile = next;
  }

  if (!warp_active) return;
  T* out_base = static_cast<T*>(p.out) +
                int64_t{q_begin + q_tile * kBlockQ + warp * 16} * p.num_heads * HD +
                int64_t{head} * HD;
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    const float sum = mma_row_sum(l[ri]);
    const int row = g + ri * 8;
    if (warp * 16 + row >= rows_here) continue;
    const float inv = sum > 0.0f ? 1.0f / sum * p.v_scale : 0.0f;
    T* dst = out_base + int64_t{row} * p.num_heads * HD + tq * 2;
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt)
      *reinterpret_cast<uint32_t*>(dst + dt * 8) =
          pack2<T>(o[dt][ri * 2] * inv, o[dt][ri * 2 + 1] * inv);
  }
}

template <typename T, typename TC, int HD>
void launch_typed(const FlashParams& p, const AttentionMetadata& meta, cudaStream_t stream) {
  constexpr size_t kSmem = smem_bytes<HD>();
  IB_CUDA_CHECK(
      cudaFuncSetAttribute(flash_kernel<T, TC, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kSmem)),
      "attention(flash)");
  const dim3 grid(static_cast<unsigned>((meta.max_query_len + kBlockQ - 1) / kBlockQ),
                  static_cast<unsigned>(p.num_heads), static_cast<unsigned>(meta.num_seqs));
  flash_kernel<T, TC, HD><<<grid, kThreads, kSmem, stream>>>(p);
}

}  // namespace

bool flash_supports(DType dtype, const AttentionShape& shape) {
  return (dtype == DType::kBF16 || dtype == DType::kF16) &&
         cuda_attention_supports_head_dim(shape.head_dim);
}

void launch_attention_flash(const Tensor& qkv, const KvCacheLayer& kv,
                            const AttentionMetadata& meta, const AttentionShape& shape, Tensor out,
                            cudaStream_t stream) {
  IB_ASSERT(flash_supports(qkv.dtype, shape), "attention(flash): unsupported dtype or head_dim");
  IB_ASSERT(aligned16(qkv.data) && aligned16(kv.k.data) && aligned16(kv.v.data) &&
                (reinterpret_cast<uintptr_t>(out.data) & 3u) == 0,
            "attention(flash): tensors must be 16-byte aligned");
  if (meta.num_tokens == 0 || meta.max_query_len == 0) return;
  const FlashParams p = paged_attention_params(qkv, kv, meta, shape, out);
  const auto run = [&](auto tag, auto cache_tag) {
    using T = decltype(tag);
    using TC = decltype(cache_tag);
    switch (shape.head_dim) {
      case 64:
        launch_typed<T, TC, 64>(p, meta, stream);
        break;
      case 96:
        launch_typed<T, TC, 96>(p, meta, stream);
        break;
      case 256:
        launch_typed<T, TC, 256>(p, meta, stream);
        break;
      default:
        launch_typed<T, TC, 128>(p, meta, stream);
        break;
    }
  };
  const bool fp8 = kv.k.dtype == DType::kF8E4M3;
  if (qkv.dtype == DType::kBF16) {
    fp8 ? run(bf16{}, uint8_t{}) : run(bf16{}, bf16{});
  } else {
    fp8 ? run(f16{}, uint8_t{}) : run(f16{}, f16{});
  }
  IB_CUDA_CHECK_LAUNCH("attention(flash)");
}

}  // namespace ib::cuda
