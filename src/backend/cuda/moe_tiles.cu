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
// batches route one or two pairs to most experts. moe_warps.cu gives each work item to a warp.
#include <algorithm>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/moe_device.cuh"
#include "backend/cuda/detail/moe_kernels.h"
#include "backend/cuda/detail/moe_tiles.cuh"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace {

constexpr int kThreads = moe::kTileThreads;
constexpr int kWarps = moe::kTileWarps;
constexpr int kBlocksPerSm = moe::kTileBlocksPerSm;
using moe::kTilePairs;
using moe::kTileRows;
using moe::TileArgs;
// IB_MOE_WIDE: single-token steps route one pair to each expert; tiles of twice the rows, one pair
// a pass, put twice the bytes in flight per pass and halve the passes (and their reductions).
constexpr int kWideRows = 16;
constexpr int kWidePairs = 1;

// One tile (outputs n0 ..) of weight w for the pairs list[0, n_pairs), kPairs a pass; the whole
// block takes part (it ends on a barrier, so partial can be reused at once).
template <typename T, int V, bool kGateUp, int kRows, int kPairs>
__device__ __forceinline__ void run_tile(const TileArgs<T>& a, const T* w, int64_t n0,
                                         const int* list, int n_pairs,
                                         float (&partial)[kWarps][kRows][kPairs]) {
  constexpr int kFeatures = moe::tile_features<kGateUp, kRows>();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n_out = a.n_out, k_dim = a.k_dim;
  const T* rows[kRows];
  moe::tile_rows<T, kGateUp>(a, w, n0, rows);
  for (int base = 0; base < n_pairs; base += kPairs) {
    const int nb = min(kPairs, n_pairs - base);
    const T* xr[kPairs];
#pragma unroll
    for (int b = 0; b < kPairs; ++b)
      xr[b] = a.x + int64_t{list[base + (b < nb ? b : 0)] / a.tokens_per_pair} * a.x_stride;
    float acc[kRows][kPairs] = {};
#pragma unroll 1
    for (int64_t c = int64_t{threadIdx.x} * V; c < k_dim; c += int64_t{kThreads} * V)
      moe::accumulate_vector<T, V>(rows, xr, c, nb, acc);
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
  constexpr int kFeatures = moe::tile_features<kGateUp, kRows>();
  const int64_t tiles = (a.n_out + kFeatures - 1) / kFeatures;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x)
    run_tile<T, V, kGateUp, kRows, kPairs>(a, w, tile * kFeatures, list, n_pairs, partial);
}

// IB_MOE_BALANCE: a grid of the device's resident blocks, each sorting the chunk's pairs by expert
// once, then walking the work items (tile, distinct expert) with the grid's stride, so every
// block gets the same number of items however many experts the chunk routes to (moe_tile_kernel
// gives every slot the same blocks, idle where a slot has no expert).
template <typename T, int V, bool kGateUp>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    moe_balanced_kernel(TileArgs<T> a, const int32_t* ids, int pairs, MoeExpertPtrs weights) {
  __shared__ moe::ExpertSort s;
  __shared__ float partial[kWarps][kTileRows][kTilePairs];
  pdl_wait();  // IB_MOE_PDL
  pdl_trigger();
  moe::sort_by_expert(ids, pairs, s);
  constexpr int kFeatures = moe::tile_features<kGateUp>();
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
    if (form == MoeTileForm::kBalanced) {
      auto* gate_kernel = vec ? moe_balanced_kernel<T, kV, true> : moe_balanced_kernel<T, 1, true>;
      auto* down_kernel =
          vec ? moe_balanced_kernel<T, kV, false> : moe_balanced_kernel<T, 1, false>;
      const int64_t resident = int64_t{kBlocksPerSm} * std::max(num_sms, 1);
      const auto gate_blocks = static_cast<unsigned>(std::min(resident, gate_tiles * slots));
      const auto down_blocks = static_cast<unsigned>(std::min(resident, down_tiles * slots));
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
