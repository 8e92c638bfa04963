// The experts' matmuls with 4-bit weights (kInt4W4A16: AWQ and GPTQ checkpoints, or --quantization
// awq / gptq at load), for Mixtral-8x22B in AWQ (issue 15). moe_tiles.cu's layout on the W4A16
// decode GEMV's tensor-core step (detail/gemv_int4.cuh): a block owns a tile of 16 weight rows
// (the MMA's M) and splits K across its 8 warps; a warp step covers 128 k, each lane loading its
// 16 bytes (32 codes) of the tile's rows r and r + 8; the pairs routed to the block's expert are
// the MMA's N, 8 a pass (lane's column: pair lane / 4). Each warp loads kSteps steps' codes and
// group parameters before it multiplies (kSteps x 1 KiB of codes in flight a warp).
//
// gate_up: a tile is 8 features, row r its gate row and row r + 8 its up row, so the MMA's
// accumulators hold a feature's gate and up sums for the same pair in the same lane; act = silu(g)
// * u with g and u rounded to T first (as the unfused matmul then silu_mul). down: a tile is 16
// output rows, written to y (f32, rounded to T).
#include <algorithm>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/gemv_int4.cuh"
#include "backend/cuda/detail/mma.cuh"
#include "backend/cuda/detail/moe_device.cuh"
#include "backend/cuda/detail/moe_kernels.h"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 16;        // weight rows a tile (the MMA's M)
constexpr int kPassPairs = 8;    // pairs a pass (the MMA's N)
constexpr int kSteps = 4;        // 4-bit steps a warp loads before it multiplies
constexpr int kBlocksPerSm = 2;  // __launch_bounds__: at most 128 registers a thread
constexpr int kRing = 4;  // IB_MOE_INT4_RING: steps in flight a warp (4 KiB of shared memory)

template <typename T>
using Int4Args = moe::TileArgs<T>;  // the operands, as the dense tiles'

// log2(v) where v is a power of two, else -1.
__host__ __device__ constexpr int pow2_shift(int v) {
  if (v <= 0 || (v & (v - 1)) != 0) return -1;
  int shift = 0;
  while ((1 << shift) < v) ++shift;
  return shift;
}

// What every 4-bit expert kernel derives from its expert and operands: the expert's arrays, K in
// steps and groups (the group of step s: s >> shift where the steps a group are a power of two,
// else s / steps_per_group), the tiles, and this lane's place in the MMA (r = lane / 4, q = lane %
// 4).
template <bool kGateUp>
struct Int4Geometry {
  static constexpr int kFeatures = kGateUp ? kRows / 2 : kRows;  // outputs a tile
  const uint8_t* codes;
  const uint16_t* scales;
  const uint8_t* zeros;
  int64_t k_dim, n_out, tiles;
  int steps, groups, steps_per_group, shift;
  int warp, lane, r, q;
  __device__ Int4Geometry(const MoeInt4Ptrs& w, int e, int64_t k, int64_t n)
      : codes(static_cast<const uint8_t*>(w.codes[e])),
        scales(static_cast<const uint16_t*>(w.scales[e])),
        zeros(static_cast<const uint8_t*>(w.zeros[e])),
        k_dim(k),
        n_out(n),
        tiles((n + kFeatures - 1) / kFeatures),
        steps(static_cast<int>(k / kGemvInt4StepK)),
        groups(static_cast<int>(k / w.group_size)),
        steps_per_group(w.group_size / kGemvInt4StepK),
        shift(pow2_shift(steps_per_group)),
        warp(static_cast<int>(threadIdx.x) / 32),
        lane(static_cast<int>(threadIdx.x) % 32),
        r(lane / 4),
        q(lane % 4) {}
  // This lane's two weight rows in the tile of outputs n0..: gate_up, the feature's gate row and
  // its up row; down, rows r and r + 8. Rows past the end read the last one (never stored).
  __device__ void rows(int64_t n0, int64_t& row_a, int64_t& row_b) const {
    row_a = min(n0 + r, n_out - 1);
    row_b = kGateUp ? n_out + row_a : min(n0 + r + 8, n_out - 1);
  }
  // Step s's 16 bytes of codes of row `row` for this lane.
  __device__ const uint8_t* codes_at(int64_t row, int s) const {
    return codes + row * (k_dim / 2) + q * 16 + int64_t{s} * (kGemvInt4StepK / 2);
  }
  __device__ Int4Group group(int64_t row_a, int64_t row_b, int s) const {
    const Int4GroupRows group_rows{static_cast<int32_t>(row_a * groups),
                                   static_cast<int32_t>(row_b * groups)};
    return load_int4_group(scales, zeros, group_rows, shift, steps_per_group, s);
  }
};

// The block's sums of the tile of outputs n0.. for pairs list[0, nb) (nb <= 8): each warp's MMA
// accumulators into partial, added over the warps, stored (gate_up: act = silu(g) * u, g and u
// rounded to T first; down: y rounded to T). The whole block takes part; it ends on a barrier, so
// partial can be written again at once.
template <typename T, bool kGateUp>
__device__ void store_tile(const Int4Args<T>& a, int64_t n0, const int* list, int nb,
                           const float (&acc)[1][4], float (&partial)[kWarps][4][32]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[warp][i][lane] = acc[0][i];
  __syncthreads();
  // The MMA's C: lane l's registers 0, 1 are row l / 4, columns 2 (l % 4) and + 1; 2, 3 the same
  // columns of row l / 4 + 8.
  if constexpr (kGateUp) {
    if (threadIdx.x < 64) {
      const int l = threadIdx.x / 2, j = threadIdx.x % 2;
      const int col = 2 * (l % 4) + j;
      const int64_t feature = n0 + l / 4;
      if (col < nb && feature < a.n_out) {
        float gs = 0.0f, us = 0.0f;
#pragma unroll
        for (int wi = 0; wi < kWarps; ++wi) {
          gs += partial[wi][j][l];
          us += partial[wi][2 + j][l];
        }
        gs = to_f32(from_f32<T>(gs));
        us = to_f32(from_f32<T>(us));
        a.act[int64_t{list[col]} * a.n_out + feature] = from_f32<T>(silu(gs) * us);
      }
    }
  } else if (threadIdx.x < 128) {
    const int l = threadIdx.x / 4, reg = threadIdx.x % 4;
    const int col = 2 * (l % 4) + reg % 2;
    const int64_t row = n0 + l / 4 + (reg / 2) * 8;
    if (col < nb && row < a.n_out) {
      float sum = 0.0f;
#pragma unroll
      for (int wi = 0; wi < kWarps; ++wi) sum += partial[wi][reg][l];
      a.y[int64_t{list[col]} * a.n_out + row] = to_f32(from_f32<T>(sum));
    }
  }
  __syncthreads();
}

// Grid (blocks per slot, min(E, pairs)): a block finds its slot's expert and pairs, then walks
// the tiles with the grid's stride, the pairs 8 a pass; each warp loads kSteps of its steps
// (warp, warp + 8, ...) before it multiplies them.
template <typename T, bool kGateUp>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    moe_int4_kernel(Int4Args<T> a, const int32_t* ids, int pairs, MoeInt4Ptrs w) {
  __shared__ moe::SlotPairs slot;
  __shared__ float partial[kWarps][4][32];
  pdl_wait();  // IB_MOE_PDL
  pdl_trigger();
  int e = -1;
  const int n_pairs = moe::slot_pairs(ids, pairs, slot, &e);
  if (n_pairs == 0) return;
  const Int4Geometry<kGateUp> g(w, e, a.k_dim, a.n_out);
  constexpr int kFeatures = Int4Geometry<kGateUp>::kFeatures;
  for (int64_t tile = blockIdx.x; tile < g.tiles; tile += gridDim.x) {
    int64_t row_a, row_b;
    g.rows(tile * kFeatures, row_a, row_b);
    for (int base = 0; base < n_pairs; base += kPassPairs) {
      const int nb = min(kPassPairs, n_pairs - base);
      const int* list = slot.list + base;
      // The B operand's column of this lane: pair r of the pass (its first where r >= nb).
      const T* x_ptr[1] = {
          a.x + int64_t{list[g.r < nb ? g.r : 0] / a.tokens_per_pair} * a.x_stride + g.q * 32};
      float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
      for (int s0 = g.warp; s0 < g.steps; s0 += kWarps * kSteps) {
        uint4 wa[kSteps], wb[kSteps];
        Int4Group grp[kSteps];
#pragma unroll
        for (int i = 0; i < kSteps; ++i) {
          const int s = s0 + i * kWarps;
          if (s < g.steps) {
            wa[i] = load_stream16(g.codes_at(row_a, s));
            wb[i] = load_stream16(g.codes_at(row_b, s));
            grp[i] = g.group(row_a, row_b, s);
          }
        }
#pragma unroll
        for (int i = 0; i < kSteps; ++i) {
          const int s = s0 + i * kWarps;
          if (s < g.steps) {
            uint4 xv[1][4];
            gemv_load_x_int4<T, 1>(x_ptr, int64_t{s} * kGemvInt4StepK, xv);
            gemv_step_int4<T, 1>(acc, wa[i], wb[i], xv, grp[i]);
          }
        }
      }
      store_tile<T, kGateUp>(a, tile * kFeatures, list, nb, acc, partial);
    }
  }
}

// IB_MOE_INT4_RING: chunks of at most 8 tokens (so at most 8 pairs an expert, one pass). Each
// warp streams its steps of all the block's tiles, one after another, through a ring of kRing
// steps in shared memory by cp.async (each lane copies and reads back only its own 16 bytes a
// row), as the dense W4A16 GEMV's ring does: a step's slot is refilled with the step kRing later
// right after its MMAs, across the tiles' ends, so kRing steps stay in flight while the block adds
// up a tile. Every warp walks ceil(steps / 8) steps a tile (past K: empty steps), so the tiles
// end at the same step in every warp. The same arithmetic in the same order as moe_int4_kernel.
template <typename T, bool kGateUp>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    moe_int4_ring_kernel(Int4Args<T> a, const int32_t* ids, int pairs, MoeInt4Ptrs w) {
  __shared__ moe::SlotPairs slot;
  __shared__ float partial[kWarps][4][32];
  __shared__ uint4 ring[kRing][kWarps][2][32];
  pdl_wait();  // IB_MOE_PDL
  pdl_trigger();
  int e = -1;
  const int nb = moe::slot_pairs(ids, pairs, slot, &e);
  if (nb == 0) return;
  const Int4Geometry<kGateUp> g(w, e, a.k_dim, a.n_out);
  constexpr int kFeatures = Int4Geometry<kGateUp>::kFeatures;
  const int64_t my_tiles =
      g.tiles > blockIdx.x ? (g.tiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  const int wsteps = (g.steps + kWarps - 1) / kWarps;      // a warp's steps a tile
  const auto total = static_cast<int>(my_tiles * wsteps);  // block-uniform
  const T* x_ptr[1] = {
      a.x + int64_t{slot.list[g.r < nb ? g.r : 0] / a.tokens_per_pair} * a.x_stride + g.q * 32};
  Int4Group grp[kRing];
  // Work item n: step i = n % wsteps of tile j = n / wsteps of the block's; its copies into slot
  // u, one commit group an item (empty past the end and past K, so that the groups count items).
  const auto issue = [&](int n, int u) {
    const int i = n % wsteps, s = g.warp + i * kWarps;
    if (n < total && s < g.steps) {
      int64_t row_a, row_b;
      g.rows((blockIdx.x + int64_t{n / wsteps} * gridDim.x) * kFeatures, row_a, row_b);
      cp_async16(&ring[u][g.warp][0][g.lane], g.codes_at(row_a, s), true);
      cp_async16(&ring[u][g.warp][1][g.lane], g.codes_at(row_b, s), true);
      grp[u] = g.group(row_a, row_b, s);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int u = 0; u < kRing; ++u) issue(u, u);
  float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
  for (int n0 = 0; n0 < total; n0 += kRing) {
#pragma unroll
    for (int u = 0; u < kRing; ++u) {
      const int n = n0 + u;
      if (n < total) {
        const int i = n % wsteps, s = g.warp + i * kWarps;
        cp_async_wait<kRing - 1>();
        if (s < g.steps) {
          const uint4 wa = ring[u][g.warp][0][g.lane], wb = ring[u][g.warp][1][g.lane];
          uint4 xv[1][4];
          gemv_load_x_int4<T, 1>(x_ptr, int64_t{s} * kGemvInt4StepK, xv);
          gemv_step_int4<T, 1>(acc, wa, wb, xv, grp[u]);
        }
        issue(n + kRing, u);    // the slot's bytes are in registers now
        if (i == wsteps - 1) {  // the tile's last step, in every warp at once
          store_tile<T, kGateUp>(a, (blockIdx.x + int64_t{n / wsteps} * gridDim.x) * kFeatures,
                                 slot.list, nb, acc, partial);
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[0][c] = 0.0f;
        }
      }
    }
  }
  cp_async_wait<0>();
}

// Blocks per expert slot: two resident rounds of the device over the slots, at most one a tile.
unsigned int4_blocks(int64_t tiles, unsigned slots, int num_sms) {
  const int64_t want = (2 * int64_t{kBlocksPerSm} * std::max(num_sms, 1) + slots - 1) / slots;
  return static_cast<unsigned>(std::clamp<int64_t>(want, 1, tiles));
}

template <typename T>
void launch_int4(const void* x, const int32_t* ids, int pairs, int k, const MoeInt4Experts& experts,
                 int64_t d, int64_t f, unsigned slots, int num_sms, void* act, float* y,
                 cudaStream_t stream, bool pdl, bool ring) {
  const Int4Args<T> gate_args{static_cast<const T*>(x), d, k, d, f, static_cast<T*>(act), nullptr};
  const Int4Args<T> down_args{static_cast<const T*>(act), f, 1, f, d, nullptr, y};
  const dim3 gate_grid(int4_blocks((f + kRows / 2 - 1) / (kRows / 2), slots, num_sms), slots);
  const dim3 down_grid(int4_blocks((d + kRows - 1) / kRows, slots, num_sms), slots);
  // The ring form takes one pass of pairs an expert: chunks of at most 8 tokens.
  const bool one_pass = ring && pairs <= kPassPairs * k;
  launch_kernel("moe_experts (4-bit)", pdl,
                one_pass ? moe_int4_ring_kernel<T, true> : moe_int4_kernel<T, true>, gate_grid,
                dim3(kThreads), 0, stream, gate_args, ids, pairs, experts.gate_up);
  launch_kernel("moe_experts (4-bit)", pdl,
                one_pass ? moe_int4_ring_kernel<T, false> : moe_int4_kernel<T, false>, down_grid,
                dim3(kThreads), 0, stream, down_args, ids, pairs, experts.down);
}

}  // namespace

void launch_moe_int4(const void* x, const int32_t* ids, int pairs, int k,
                     const MoeInt4Experts& experts, int64_t d, int64_t f, unsigned slots,
                     int num_sms, DType dtype, void* act, float* y, cudaStream_t stream, bool pdl,
                     bool ring) {
  static_assert(kGemvInt4StepK == 128, "moe_int4_takes: the 4-bit step");
  IB_ASSERT(moe_int4_takes(d, experts.gate_up.group_size) &&
                moe_int4_takes(f, experts.down.group_size) && experts.gate_up.group_size > 0 &&
                experts.down.group_size > 0 && aligned16(x) && aligned16(act),
            "moe_experts (4-bit): D, F and the group sizes multiples of 128, x and act aligned");
  if (dtype == DType::kBF16) {
    launch_int4<__nv_bfloat16>(x, ids, pairs, k, experts, d, f, slots, num_sms, act, y, stream, pdl,
                               ring);
  } else {
    IB_ASSERT(dtype == DType::kF16, "moe_experts (4-bit): x in bf16 or fp16");
    launch_int4<__half>(x, ids, pairs, k, experts, d, f, slots, num_sms, act, y, stream, pdl, ring);
  }
}

}  // namespace ib::cuda
