// The experts' matmuls in tiles (IB_MOE_TILES; moe.cu's other form gives each weight row a warp
// that walks all of K). Here a block owns a tile of kTileRows weight rows and splits K across its
// 8 warps, every thread loading its 16 bytes of each of the tile's rows at once (kTileRows loads
// in flight, the dense decode GEMV's layout); the warps' partial sums meet in shared memory. A
// block finds its expert and pairs once, then walks tiles with a stride of the grid's width, so the
// grid is sized to the device (a few blocks per SM per expert slot), not to the weight.
//
// gate_up: a tile is kTileRows / 2 features (their gate rows and their up rows), written as
// silu(g) * u with g and u rounded to T first (as the unfused matmul then silu_mul); down: a tile
// is kTileRows output rows, written to y (f32, rounded to T). Pairs go kTilePairs at a time; decode
// batches route one or two pairs to most experts. The warp form (IB_MOE_WARPS) gives each work
// item to one warp, K split across its lanes, the sums met by shuffles.
#include <algorithm>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/moe_device.cuh"
#include "backend/cuda/detail/moe_kernels.h"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTileRows = 8;
constexpr int kTilePairs = 4;
// IB_MOE_WIDE: single-token steps route one pair to each expert; tiles of twice the rows, one pair
// a pass, put twice the bytes in flight per pass and halve the passes (and their reductions).
constexpr int kWideRows = 16;
constexpr int kWidePairs = 1;
// IB_MOE_WARPS: pairs a pass of a warp's tile.
constexpr int kWarpPairs = 2;
// Resident blocks per SM: __launch_bounds__ caps the registers at 128 for two, and ptxas uses
// 102-126 (no third fits in 64 K registers).
constexpr int kBlocksPerSm = 2;

// gate_up (kGateUp): a tile's first kTileRows / 2 rows are its features' gate rows, the rest their
// up rows (moe::TileArgs: the operands).
using moe::TileArgs;

template <bool kGateUp, int kRows = kTileRows>
constexpr int tile_features() {
  return kGateUp ? kRows / 2 : kRows;  // outputs per tile
}

// The weight rows of a tile (outputs n0 ..) of w: gate_up's first kRows / 2 its features' gate
// rows, the rest their up rows; rows past the end read the last one (their sums are never stored).
template <typename T, bool kGateUp, int kRows>
__device__ __forceinline__ void tile_rows(const TileArgs<T>& a, const T* w, int64_t n0,
                                          const T* (&rows)[kRows]) {
  constexpr int kFeatures = tile_features<kGateUp, kRows>();
  const int64_t n_out = a.n_out;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t feature = n0 + r % kFeatures < n_out ? n0 + r % kFeatures : n_out - 1;
    const int64_t row = kGateUp && r >= kFeatures ? n_out + feature : feature;
    rows[r] = w + row * a.k_dim;
  }
}

// acc[r][b] += the vector of row r at c . the vector of pair b's x at c, for b < nb: every row's
// vector first (kRows loads in flight), converted as it is used.
template <typename T, int V, int kRows, int kPairs>
__device__ __forceinline__ void accumulate_vector(const T* const (&rows)[kRows],
                                                  const T* const (&xr)[kPairs], int64_t c, int nb,
                                                  float (&acc)[kRows][kPairs]) {
  T wv[kRows][V];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if constexpr (V == 1) {
      wv[r][0] = rows[r][c];
    } else {
      *reinterpret_cast<uint4*>(wv[r]) = load_stream16(rows[r] + c);
    }
  }
#pragma unroll
  for (int b = 0; b < kPairs; ++b) {
    if (b >= nb) break;
    float xv[V];
    moe::load_vec<T, V, false>(xr[b] + c, xv);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int i = 0; i < V; ++i) acc[r][b] += to_f32(wv[r][i]) * xv[i];
    }
  }
}

// One tile (outputs n0 ..) of weight w for the pairs list[0, n_pairs), kPairs a pass; the whole
// block takes part (it ends on a barrier, so partial can be reused at once).
template <typename T, int V, bool kGateUp, int kRows, int kPairs>
__device__ __forceinline__ void run_tile(const TileArgs<T>& a, const T* w, int64_t n0,
                                         const int* list, int n_pairs,
                                         float (&partial)[kWarps][kRows][kPairs]) {
  constexpr int kFeatures = tile_features<kGateUp, kRows>();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n_out = a.n_out, k_dim = a.k_dim;
  const T* rows[kRows];
  tile_rows<T, kGateUp>(a, w, n0, rows);
  for (int base = 0; base < n_pairs; base += kPairs) {
    const int nb = min(kPairs, n_pairs - base);
    const T* xr[kPairs];
#pragma unroll
    for (int b = 0; b < kPairs; ++b)
      xr[b] = a.x + int64_t{list[base + (b < nb ? b : 0)] / a.tokens_per_pair} * a.x_stride;
    float acc[kRows][kPairs] = {};
#pragma unroll 1
    for (int64_t c = int64_t{threadIdx.x} * V; c < k_dim; c += int64_t{kThreads} * V)
      accumulate_vector<T, V>(rows, xr, c, nb, acc);
#pragma unroll
    for (int b = 0; b < kPairs; ++b) {
      if (b >= nb) break;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float s = warp_sum(acc[r][b]);
        if (lane == 0) partial[warp][r][b] = s;
      }
    }
    __syncthreads();
    const int r = threadIdx.x / kPairs, b = threadIdx.x % kPairs;
    if (r < kFeatures && b < nb && n0 + r < n_out) {
      const int64_t p = list[base + b];
      if constexpr (kGateUp) {
        float g = 0.0f, u = 0.0f;
#pragma unroll
        for (int i = 0; i < kWarps; ++i) {
          g += partial[i][r][b];
          u += partial[i][kFeatures + r][b];
        }
        g = to_f32(from_f32<T>(g));
        u = to_f32(from_f32<T>(u));
        a.act[p * n_out + n0 + r] = from_f32<T>(silu(g) * u);
      } else {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < kWarps; ++i) s += partial[i][r][b];
        a.y[p * n_out + n0 + r] = to_f32(from_f32<T>(s));
      }
    }
    __syncthreads();  // partial is rewritten by the next pass
  }
}

// Grid (blocks per slot, min(E, pairs)): a block finds its slot's expert and pairs, then walks
// the tiles with the grid's stride.
template <typename T, int V, bool kGateUp, int kRows = kTileRows, int kPairs = kTilePairs>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    moe_tile_kernel(TileArgs<T> a, const int32_t* ids, int pairs, MoeExpertPtrs weights) {
  __shared__ moe::SlotPairs slot;
  __shared__ float partial[kWarps][kRows][kPairs];
  pdl_wait();  // IB_MOE_PDL
  pdl_trigger();
  int e = -1;
  const int n_pairs = moe::slot_pairs(ids, pairs, slot, &e);
  if (n_pairs == 0) return;
  const int* list = slot.list;
  const T* w = static_cast<const T*>(weights.ptr[e]);
  constexpr int kFeatures = tile_features<kGateUp, kRows>();
  const int64_t tiles = (a.n_out + kFeatures - 1) / kFeatures;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x)
    run_tile<T, V, kGateUp, kRows, kPairs>(a, w, tile * kFeatures, list, n_pairs, partial);
}

// The chunk's pairs sorted by expert, in shared memory: the distinct experts ascending
// (distinct[0, n_distinct)) and each one's pairs (list[start[e], start[e] + count[e])).
struct ExpertSort {
  int list[moe::kMaxChunkPairs];
  int count[kMoeMaxExperts], start[kMoeMaxExperts], distinct[kMoeMaxExperts];
  int n_distinct;
};

// Sorts the chunk's pairs by expert into s (counts, an exclusive scan, a scatter); the whole block
// takes part and finds s complete on return.
__device__ __forceinline__ void sort_by_expert(const int32_t* ids, int pairs, ExpertSort& s) {
  for (int i = threadIdx.x; i < kMoeMaxExperts; i += kThreads) s.count[i] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += kThreads) {
    const int e = ids[p];
    if (e >= 0 && e < kMoeMaxExperts) atomicAdd(&s.count[e], 1);
  }
  __syncthreads();
  if (threadIdx.x < 32) {  // one warp scans: lane l holds experts [l * kPer, (l + 1) * kPer)
    constexpr int kPer = kMoeMaxExperts / 32;
    const int lane = static_cast<int>(threadIdx.x), first = lane * kPer;
    int sum = 0, used = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      sum += s.count[first + i];
      used += s.count[first + i] > 0 ? 1 : 0;
    }
    int sum_before = sum, used_before = used;  // inclusive scans, then made exclusive
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const int s_up = __shfl_up_sync(0xffffffffu, sum_before, o);
      const int u_up = __shfl_up_sync(0xffffffffu, used_before, o);
      if (lane >= o) {
        sum_before += s_up;
        used_before += u_up;
      }
    }
    sum_before -= sum;
    used_before -= used;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = s.count[first + i];
      s.start[first + i] = sum_before;
      sum_before += c;
      if (c > 0) s.distinct[used_before++] = first + i;
    }
    if (lane == 31) s.n_distinct = used_before;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kMoeMaxExperts; i += kThreads) s.count[i] = 0;  // now cursors
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += kThreads) {
    const int e = ids[p];
    if (e >= 0 && e < kMoeMaxExperts) s.list[s.start[e] + atomicAdd(&s.count[e], 1)] = p;
  }
  __syncthreads();
}

// IB_MOE_BALANCE: a grid of the device's resident blocks, each sorting the chunk's pairs by expert
// once, then walking the work items (tile, distinct expert) with the grid's stride, so every
// block gets the same number of items however many experts the chunk routes to (moe_tile_kernel
// gives every slot the same blocks, idle where a slot has no expert).
template <typename T, int V, bool kGateUp>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    moe_balanced_kernel(TileArgs<T> a, const int32_t* ids, int pairs, MoeExpertPtrs weights) {
  __shared__ ExpertSort s;
  __shared__ float partial[kWarps][kTileRows][kTilePairs];
  pdl_wait();  // IB_MOE_PDL
  pdl_trigger();
  sort_by_expert(ids, pairs, s);
  constexpr int kFeatures = tile_features<kGateUp>();
  const int64_t tiles = (a.n_out + kFeatures - 1) / kFeatures;
  const int n_distinct = s.n_distinct;
  const int64_t items = tiles * n_distinct;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int e = s.distinct[item % n_distinct];
    const T* w = static_cast<const T*>(weights.ptr[e]);
    run_tile<T, V, kGateUp, kTileRows, kTilePairs>(a, w, (item / n_distinct) * kFeatures,
                                                   s.list + s.start[e], s.count[e], partial);
  }
}

// One butterfly step of warp_sum_transposed: of v[0, 2 * kHalf), a lane keeps the half its lane
// bit kHalf selects, adding the partner's copy of it, and hands the partner the other half.
template <int kHalf, int N>
__device__ __forceinline__ void transposed_step(float (&v)[N], int lane) {
  if constexpr (kHalf >= 1) {
    const bool upper = (lane & kHalf) != 0;
#pragma unroll
    for (int i = 0; i < kHalf; ++i) {
      const float send = upper ? v[i] : v[i + kHalf];
      const float keep = upper ? v[i + kHalf] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, kHalf);
    }
    transposed_step<kHalf / 2>(v, lane);
  }
}

// The sum over the warp of each of a lane's N values (N a power of two up to 32), lane l receiving
// value l % N's: butterfly steps over the lane bits below N, each handing the partner the half it
// does not keep, then a plain sum over the bits above (N - 1 + log2(32 / N) shuffles for N sums,
// where a warp_sum of each would take 5 N).
template <int N>
__device__ __forceinline__ float warp_sum_transposed(float (&v)[N]) {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "N a power of two up to 32");
  const int lane = static_cast<int>(threadIdx.x % 32);
  transposed_step<N / 2>(v, lane);
  float sum = v[0];
#pragma unroll
  for (int o = 16; o >= N; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  return sum;
}

// One pass of a warp's tile (outputs n0 ..; rows: its weight rows) over the pairs list[0, nb),
// nb <= kPairs: run_tile's arithmetic per lane, K split across the warp's lanes alone, the sums met
// by shuffles (no block barrier), so the block's other warps keep loading while this one reduces.
template <typename T, int V, bool kGateUp, int kPairs>
__device__ __forceinline__ void warp_tile_pass(const TileArgs<T>& a,
                                               const T* const (&rows)[kTileRows], int64_t n0,
                                               const int* list, int nb) {
  constexpr int kRows = kTileRows, kN = kRows * kPairs;
  constexpr int kFeatures = tile_features<kGateUp>();
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t n_out = a.n_out, k_dim = a.k_dim;
  const T* xr[kPairs];
#pragma unroll
  for (int b = 0; b < kPairs; ++b)
    xr[b] = a.x + int64_t{list[b < nb ? b : 0] / a.tokens_per_pair} * a.x_stride;
  float acc[kRows][kPairs] = {};
#pragma unroll 1
  for (int64_t c = int64_t{lane} * V; c < k_dim; c += int64_t{32} * V)
    accumulate_vector<T, V>(rows, xr, c, nb, acc);
  // (row r, pair b) at r * kPairs + b; lane l receives l % kN's sum
  const float sum = warp_sum_transposed(reinterpret_cast<float(&)[kN]>(acc));
  const int r = lane / kPairs, b = lane % kPairs;
  if constexpr (kGateUp) {
    const float u = __shfl_down_sync(0xffffffffu, sum, kFeatures * kPairs);  // its up row
    if (r < kFeatures && b < nb && n0 + r < n_out) {
      const float g = to_f32(from_f32<T>(sum)), uu = to_f32(from_f32<T>(u));
      a.act[int64_t{list[b]} * n_out + n0 + r] = from_f32<T>(silu(g) * uu);
    }
  } else if (lane < kN && b < nb && n0 + r < n_out) {
    a.y[int64_t{list[b]} * n_out + n0 + r] = to_f32(from_f32<T>(sum));
  }
}

// One warp's tile (outputs n0 ..) of weight w for the pairs list[0, n_pairs), kWarpPairs a pass
// (a pass's sums in registers: 8 rows x 2 pairs fit beside the weights' vectors; an expert's
// third pair takes a second pass, its weights then from L2).
template <typename T, int V, bool kGateUp>
__device__ __forceinline__ void run_warp_tile(const TileArgs<T>& a, const T* w, int64_t n0,
                                              const int* list, int n_pairs) {
  const T* rows[kTileRows];
  tile_rows<T, kGateUp>(a, w, n0, rows);
  for (int base = 0; base < n_pairs; base += kWarpPairs) {
    const int nb = min(kWarpPairs, n_pairs - base);
    if (nb == 1) {
      warp_tile_pass<T, V, kGateUp, 1>(a, rows, n0, list + base, nb);
    } else {
      warp_tile_pass<T, V, kGateUp, kWarpPairs>(a, rows, n0, list + base, nb);
    }
  }
}

// IB_MOE_WARPS: moe_balanced_kernel's grid, sort and work items, each item a warp's (consecutive
// warps take consecutive tiles of one expert) instead of the block's.
template <typename T, int V, bool kGateUp>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    moe_warp_kernel(TileArgs<T> a, const int32_t* ids, int pairs, MoeExpertPtrs weights) {
  __shared__ ExpertSort s;
  pdl_wait();  // IB_MOE_PDL
  pdl_trigger();
  sort_by_expert(ids, pairs, s);
  constexpr int kFeatures = tile_features<kGateUp>();
  const int64_t tiles = (a.n_out + kFeatures - 1) / kFeatures;
  const int64_t items = tiles * s.n_distinct;
  const int64_t stride = int64_t{gridDim.x} * kWarps;
  for (int64_t item = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32; item < items;
       item += stride) {
    const int e = s.distinct[item / tiles];
    run_warp_tile<T, V, kGateUp>(a, static_cast<const T*>(weights.ptr[e]),
                                 (item % tiles) * kFeatures, s.list + s.start[e], s.count[e]);
  }
}

// Blocks per expert slot: two resident rounds of the device over the slots (slots past the
// chunk's distinct experts exit at once and others take their place), at most one per tile.
unsigned tile_blocks(int64_t tiles, unsigned slots, int num_sms) {
  const int64_t want = (2 * int64_t{kBlocksPerSm} * std::max(num_sms, 1) + slots - 1) / slots;
  return static_cast<unsigned>(std::clamp<int64_t>(want, 1, tiles));
}

}  // namespace

void launch_moe_tiles(const void* x, const int32_t* ids, int pairs, int k,
                      const MoeExpertPtrs& gate_up, const MoeExpertPtrs& down, bool vec, int64_t d,
                      int64_t f, unsigned slots, int num_sms, MoeTileForm form, DType dtype,
                      void* act, float* y, cudaStream_t stream, bool pdl) {
  IB_DISPATCH_FLOAT(dtype, T, {
    constexpr int kV = kVec16<T>;
    const TileArgs<T> gate_args{static_cast<const T*>(x), d,      k, d, f,
                                static_cast<T*>(act),     nullptr};
    const TileArgs<T> down_args{static_cast<const T*>(act), f, 1, f, d, nullptr, y};
    const int rows = form == MoeTileForm::kWide ? kWideRows : kTileRows;
    const int64_t gate_tiles = (f + rows / 2 - 1) / (rows / 2);
    const int64_t down_tiles = (d + rows - 1) / rows;
    if (form == MoeTileForm::kBalanced || form == MoeTileForm::kWarps) {
      const bool warps = form == MoeTileForm::kWarps;
      auto* gate_kernel =
          warps ? (vec ? moe_warp_kernel<T, kV, true> : moe_warp_kernel<T, 1, true>)
                : (vec ? moe_balanced_kernel<T, kV, true> : moe_balanced_kernel<T, 1, true>);
      auto* down_kernel =
          warps ? (vec ? moe_warp_kernel<T, kV, false> : moe_warp_kernel<T, 1, false>)
                : (vec ? moe_balanced_kernel<T, kV, false> : moe_balanced_kernel<T, 1, false>);
      // A block per item (balanced) or per kWarps items (warps), at most the resident blocks.
      const int64_t per_block = warps ? kWarps : 1;
      const int64_t resident = int64_t{kBlocksPerSm} * std::max(num_sms, 1);
      const auto gate_blocks = static_cast<unsigned>(
          std::min(resident, (gate_tiles * slots + per_block - 1) / per_block));
      const auto down_blocks = static_cast<unsigned>(
          std::min(resident, (down_tiles * slots + per_block - 1) / per_block));
      launch_kernel("moe_experts (tiles)", pdl, gate_kernel, dim3(gate_blocks), dim3(kThreads), 0,
                    stream, gate_args, ids, pairs, gate_up);
      launch_kernel("moe_experts (tiles)", pdl, down_kernel, dim3(down_blocks), dim3(kThreads), 0,
                    stream, down_args, ids, pairs, down);
      return;
    }
    using Kernel = void (*)(TileArgs<T>, const int32_t*, int, MoeExpertPtrs);
    Kernel gate_kernel = nullptr, down_kernel = nullptr;
    if (form == MoeTileForm::kWide) {
      gate_kernel = vec ? moe_tile_kernel<T, kV, true, kWideRows, kWidePairs>
                        : moe_tile_kernel<T, 1, true, kWideRows, kWidePairs>;
      down_kernel = vec ? moe_tile_kernel<T, kV, false, kWideRows, kWidePairs>
                        : moe_tile_kernel<T, 1, false, kWideRows, kWidePairs>;
    } else {
      gate_kernel = vec ? moe_tile_kernel<T, kV, true> : moe_tile_kernel<T, 1, true>;
      down_kernel = vec ? moe_tile_kernel<T, kV, false> : moe_tile_kernel<T, 1, false>;
    }
    const dim3 gate_grid(tile_blocks(gate_tiles, slots, num_sms), slots);
    const dim3 down_grid(tile_blocks(down_tiles, slots, num_sms), slots);
    launch_kernel("moe_experts (tiles)", pdl, gate_kernel, gate_grid, dim3(kThreads), 0, stream,
                  gate_args, ids, pairs, gate_up);
    launch_kernel("moe_experts (tiles)", pdl, down_kernel, down_grid, dim3(kThreads), 0, stream,
                  down_args, ids, pairs, down);
  });
}

}  // namespace ib::cuda
