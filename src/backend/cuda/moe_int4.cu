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

// Operands of a kernel. x row of pair p: x + (p / tokens_per_pair) * x_stride; K = k_dim.
// gate_up (kGateUp): out act (stride n_out = F), rows F.. of the weight its up rows; down: out y
// (stride n_out = D, f32).
template <typename T>
struct Int4Args {
  const T* x;
  int64_t x_stride;
  int tokens_per_pair;
  int64_t k_dim;
  int64_t n_out;
  T* act;
  float* y;
};

// Grid (blocks per slot, min(E, pairs)): a block finds its slot's expert and pairs, then walks
// the tiles with the grid's stride.
template <typename T, bool kGateUp>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    moe_int4_kernel(Int4Args<T> a, const int32_t* ids, int pairs, MoeInt4Ptrs w) {
  __shared__ int list[moe::kMaxChunkPairs];
  __shared__ int count, expert;
  __shared__ unsigned present[kMoeMaxExperts / 32];
  __shared__ float partial[kWarps][4][32];
  pdl_wait();  // IB_MOE_PDL
  pdl_trigger();
  const int e = moe::expert_of_slot(ids, pairs, static_cast<int>(blockIdx.y), present, &expert);
  if (e < 0) return;
  const int n_pairs = moe::collect_pairs(ids, pairs, e, list, &count);
  if (n_pairs == 0) return;
  const auto* codes = static_cast<const uint8_t*>(w.codes[e]);
  const auto* scales = static_cast<const uint16_t*>(w.scales[e]);
  const auto* zeros = static_cast<const uint8_t*>(w.zeros[e]);
  const int64_t k_dim = a.k_dim, n_out = a.n_out;
  const int steps = static_cast<int>(k_dim / kGemvInt4StepK);
  const int groups = static_cast<int>(k_dim / w.group_size);
  const int steps_per_group = w.group_size / kGemvInt4StepK;
  const int shift =
      (steps_per_group & (steps_per_group - 1)) == 0 ? __ffs(steps_per_group) - 1 : -1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 4, q = lane % 4;
  constexpr int kFeatures = kGateUp ? kRows / 2 : kRows;  // outputs a tile
  const int64_t tiles = (n_out + kFeatures - 1) / kFeatures;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t n0 = tile * kFeatures;
    // Rows past the end read the last one; their sums are never stored.
    int64_t row_a, row_b;
    if constexpr (kGateUp) {
      row_a = std::min(n0 + r, n_out - 1);  // the feature's gate row
      row_b = n_out + row_a;                // its up row
    } else {
      row_a = std::min(n0 + r, n_out - 1);
      row_b = std::min(n0 + r + 8, n_out - 1);
    }
    const uint8_t* wa_ptr = codes + row_a * (k_dim / 2) + q * 16;
    const uint8_t* wb_ptr = codes + row_b * (k_dim / 2) + q * 16;
    const Int4GroupRows group_rows{static_cast<int32_t>(row_a * groups),
                                   static_cast<int32_t>(row_b * groups)};
    for (int base = 0; base < n_pairs; base += kPassPairs) {
      const int nb = min(kPassPairs, n_pairs - base);
      // The B operand's column of this lane: pair base + r (the pass's first where r >= nb).
      const T* x_ptr[1] = {
          a.x + int64_t{list[base + (r < nb ? r : 0)] / a.tokens_per_pair} * a.x_stride + q * 32};
      float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
      // This warp's steps: warp, warp + 8, ...; kSteps of them loaded at once.
      for (int s0 = warp; s0 < steps; s0 += kWarps * kSteps) {
        uint4 wa[kSteps], wb[kSteps];
        Int4Group g[kSteps];
#pragma unroll
        for (int i = 0; i < kSteps; ++i) {
          const int s = s0 + i * kWarps;
          if (s < steps) {
            wa[i] = load_stream16(wa_ptr + int64_t{s} * (kGemvInt4StepK / 2));
            wb[i] = load_stream16(wb_ptr + int64_t{s} * (kGemvInt4StepK / 2));
            g[i] = load_int4_group(scales, zeros, group_rows, shift, steps_per_group, s);
          }
        }
#pragma unroll
        for (int i = 0; i < kSteps; ++i) {
          const int s = s0 + i * kWarps;
          if (s < steps) {
            uint4 xv[1][4];
            gemv_load_x_int4<T, 1>(x_ptr, int64_t{s} * kGemvInt4StepK, xv);
            gemv_step_int4<T, 1>(acc, wa[i], wb[i], xv, g[i]);
          }
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[warp][i][lane] = acc[0][i];
      __syncthreads();
      // The MMA's C: lane l's registers 0, 1 are row l / 4, columns 2 (l % 4) and + 1; 2, 3 the
      // same columns of row l / 4 + 8.
      if constexpr (kGateUp) {
        if (threadIdx.x < 64) {
          const int l = threadIdx.x / 2, j = threadIdx.x % 2;
          const int col = 2 * (l % 4) + j;
          const int64_t feature = n0 + l / 4;
          if (col < nb && feature < n_out) {
            float gs = 0.0f, us = 0.0f;
#pragma unroll
            for (int wi = 0; wi < kWarps; ++wi) {
              gs += partial[wi][j][l];
              us += partial[wi][2 + j][l];
            }
            gs = to_f32(from_f32<T>(gs));
            us = to_f32(from_f32<T>(us));
            const int64_t p = list[base + col];
            a.act[p * n_out + feature] = from_f32<T>(moe::silu(gs) * us);
          }
        }
      } else if (threadIdx.x < 128) {
        const int l = threadIdx.x / 4, reg = threadIdx.x % 4;
        const int col = 2 * (l % 4) + reg % 2;
        const int64_t row = n0 + l / 4 + (reg / 2) * 8;
        if (col < nb && row < n_out) {
          float sum = 0.0f;
#pragma unroll
          for (int wi = 0; wi < kWarps; ++wi) sum += partial[wi][reg][l];
          const int64_t p = list[base + col];
          a.y[p * n_out + row] = to_f32(from_f32<T>(sum));
        }
      }
      __syncthreads();  // partial is rewritten by the next pass
    }
  }
}

// Blocks per expert slot: two resident rounds of the device over the slots, at most one a tile.
unsigned int4_blocks(int64_t tiles, unsigned slots, int num_sms) {
  const int64_t want = (2 * int64_t{kBlocksPerSm} * std::max(num_sms, 1) + slots - 1) / slots;
  return static_cast<unsigned>(std::clamp<int64_t>(want, 1, tiles));
}

template <typename T>
void launch_int4(const void* x, const int32_t* ids, int pairs, int k, const MoeInt4Experts& experts,
                 int64_t d, int64_t f, unsigned slots, int num_sms, void* act, float* y,
                 cudaStream_t stream, bool pdl) {
  const Int4Args<T> gate_args{static_cast<const T*>(x), d, k, d, f, static_cast<T*>(act), nullptr};
  const Int4Args<T> down_args{static_cast<const T*>(act), f, 1, f, d, nullptr, y};
  const dim3 gate_grid(int4_blocks((f + kRows / 2 - 1) / (kRows / 2), slots, num_sms), slots);
  const dim3 down_grid(int4_blocks((d + kRows - 1) / kRows, slots, num_sms), slots);
  launch_kernel("moe_experts (4-bit)", pdl, moe_int4_kernel<T, true>, gate_grid, dim3(kThreads), 0,
                stream, gate_args, ids, pairs, experts.gate_up);
  launch_kernel("moe_experts (4-bit)", pdl, moe_int4_kernel<T, false>, down_grid, dim3(kThreads), 0,
                stream, down_args, ids, pairs, experts.down);
}

}  // namespace

void launch_moe_int4(const void* x, const int32_t* ids, int pairs, int k,
                     const MoeInt4Experts& experts, int64_t d, int64_t f, unsigned slots,
                     int num_sms, DType dtype, void* act, float* y, cudaStream_t stream, bool pdl) {
  IB_ASSERT(d % kGemvInt4StepK == 0 && f % kGemvInt4StepK == 0 &&
                experts.gate_up.group_size % kGemvInt4StepK == 0 &&
                experts.down.group_size % kGemvInt4StepK == 0 && experts.gate_up.group_size > 0 &&
                experts.down.group_size > 0 && aligned16(x) && aligned16(act),
            "moe_experts (4-bit): D, F and the group sizes multiples of 128, x and act aligned");
  if (dtype == DType::kBF16) {
    launch_int4<__nv_bfloat16>(x, ids, pairs, k, experts, d, f, slots, num_sms, act, y, stream,
                               pdl);
  } else {
    IB_ASSERT(dtype == DType::kF16, "moe_experts (4-bit): x in bf16 or fp16");
    launch_int4<__half>(x, ids, pairs, k, experts, d, f, slots, num_sms, act, y, stream, pdl);
  }
}

}  // namespace ib::cuda
