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
// batches route one or two pairs to most experts.
#include <algorithm>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/moe_device.cuh"
#include "backend/cuda/detail/moe_kernels.h"

namespace ib::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTileRows = 8;
constexpr int kTilePairs = 4;
// Resident blocks per SM: __launch_bounds__ caps the registers at 128 for two, and ptxas uses
// 102-126 (no third fits in 64 K registers).
constexpr int kBlocksPerSm = 2;

// out rows of one pass: r < kTileRows weight rows x b < nb pairs. x row of pair p: x + (p /
// tokens_per_pair) * x_stride; K = k_dim. For gate_up (kGateUp) the first kTileRows / 2 rows are
// the features' gate rows and the rest their up rows; out is act (stride n_out); else y (stride
// n_out, f32).
template <typename T, int V, bool kGateUp>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    moe_tile_kernel(const T* x, int64_t x_stride, int tokens_per_pair, int64_t k_dim,
                    const int32_t* ids, int pairs, MoeExpertPtrs weights, int64_t n_out, T* act,
                    float* y) {
  constexpr int kFeatures = kGateUp ? kTileRows / 2 : kTileRows;  // outputs per tile
  __shared__ int list[moe::kMaxChunkPairs];
  __shared__ int count, expert;
  __shared__ unsigned present[kMoeMaxExperts / 32];
  __shared__ float partial[kWarps][kTileRows][kTilePairs];
  const int e = moe::expert_of_slot(ids, pairs, static_cast<int>(blockIdx.y), present, &expert);
  if (e < 0) return;
  const int n_pairs = moe::collect_pairs(ids, pairs, e, list, &count);
  if (n_pairs == 0) return;
  const T* w = static_cast<const T*>(weights.ptr[e]);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t tiles = (n_out + kFeatures - 1) / kFeatures;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t n0 = tile * kFeatures;
    const T* rows[kTileRows];
#pragma unroll
    for (int r = 0; r < kTileRows; ++r) {
      // Rows past the end read the last one; their sums are never stored.
      const int64_t feature = n0 + r % kFeatures < n_out ? n0 + r % kFeatures : n_out - 1;
      const int64_t row = kGateUp && r >= kFeatures ? n_out + feature : feature;
      rows[r] = w + row * k_dim;
    }
    for (int base = 0; base < n_pairs; base += kTilePairs) {
      const int nb = min(kTilePairs, n_pairs - base);
      const T* xr[kTilePairs];
#pragma unroll
      for (int b = 0; b < kTilePairs; ++b)
        xr[b] = x + int64_t{list[base + (b < nb ? b : 0)] / tokens_per_pair} * x_stride;
      float acc[kTileRows][kTilePairs] = {};
#pragma unroll 1
      for (int64_t c = int64_t{threadIdx.x} * V; c < k_dim; c += int64_t{kThreads} * V) {
        // Every row's vector first (kTileRows loads in flight), converted as they are used.
        T wv[kTileRows][V];
#pragma unroll
        for (int r = 0; r < kTileRows; ++r) {
          if constexpr (V == 1) {
            wv[r][0] = rows[r][c];
          } else {
            *reinterpret_cast<uint4*>(wv[r]) = load_stream16(rows[r] + c);
          }
        }
#pragma unroll
        for (int b = 0; b < kTilePairs; ++b) {
          if (b >= nb) break;
          float xv[V];
          moe::load_vec<T, V, false>(xr[b] + c, xv);
#pragma unroll
          for (int r = 0; r < kTileRows; ++r) {
#pragma unroll
            for (int i = 0; i < V; ++i) acc[r][b] += to_f32(wv[r][i]) * xv[i];
          }
        }
      }
#pragma unroll
      for (int b = 0; b < kTilePairs; ++b) {
        if (b >= nb) break;
#pragma unroll
        for (int r = 0; r < kTileRows; ++r) {
          const float s = warp_sum(acc[r][b]);
          if (lane == 0) partial[warp][r][b] = s;
        }
      }
      __syncthreads();
      const int r = threadIdx.x / kTilePairs, b = threadIdx.x % kTilePairs;
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
          act[p * n_out + n0 + r] = from_f32<T>(moe::silu(g) * u);
        } else {
          float s = 0.0f;
#pragma unroll
          for (int i = 0; i < kWarps; ++i) s += partial[i][r][b];
          y[p * n_out + n0 + r] = to_f32(from_f32<T>(s));
        }
      }
      __syncthreads();  // partial is rewritten by the next pass
    }
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
                      int64_t f, unsigned slots, int num_sms, DType dtype, void* act, float* y,
                      cudaStream_t stream) {
  IB_DISPATCH_FLOAT(dtype, T, {
    constexpr int kV = kVec16<T>;
    auto* gate_kernel = vec ? moe_tile_kernel<T, kV, true> : moe_tile_kernel<T, 1, true>;
    auto* down_kernel = vec ? moe_tile_kernel<T, kV, false> : moe_tile_kernel<T, 1, false>;
    const int64_t gate_tiles = (f + kTileRows / 2 - 1) / (kTileRows / 2);
    const int64_t down_tiles = (d + kTileRows - 1) / kTileRows;
    const dim3 gate_grid(tile_blocks(gate_tiles, slots, num_sms), slots);
    const dim3 down_grid(tile_blocks(down_tiles, slots, num_sms), slots);
    gate_kernel<<<gate_grid, kThreads, 0, stream>>>(static_cast<const T*>(x), d, k, d, ids, pairs,
                                                    gate_up, f, static_cast<T*>(act), nullptr);
    down_kernel<<<down_grid, kThreads, 0, stream>>>(static_cast<const T*>(act), f, 1, f, ids, pairs,
                                                    down, d, nullptr, y);
    IB_CUDA_CHECK_LAUNCH("moe_experts (tiles)");
  });
}

}  // namespace ib::cuda
