// The experts' matmuls with each work item a warp's (IB_MOE_WARPS): moe_tiles.cu's balanced grid
// (the device's resident blocks, each sorting the chunk's pairs by expert once) and work items
// (tile of 8 weight rows, expert), but a warp, not the block, takes an item: K split across its 32
// lanes (each loading its 16 bytes of every row of the tile a step), the 8 x pairs sums met by a
// transposed butterfly of shuffles, no block barrier, so the block's other warps keep loading while
// one reduces; consecutive warps take consecutive tiles of one expert.
//
// The ring form (IB_MOE_WARP_RING, chunks of at most 8 tokens) streams each warp's steps of all its
// items through a ring of kRingStages slots in shared memory by cp.async, each slot a step's
// weight vectors and its pairs' x vectors (each lane copies and reads back only its own 16 bytes),
// as the dense GEMV's and the 4-bit experts' rings do: a slot is refilled with the step
// kRingStages later right after it is read, across the items' ends, so the step's operands are
// already there when the warp comes to it.
#include <algorithm>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/mma.cuh"
#include "backend/cuda/detail/moe_device.cuh"
#include "backend/cuda/detail/moe_kernels.h"
#include "backend/cuda/detail/moe_tiles.cuh"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace {

constexpr int kThreads = moe::kTileThreads;
constexpr int kWarps = moe::kTileWarps;
constexpr int kBlocksPerSm = moe::kTileBlocksPerSm;
using moe::kTileRows;
using moe::TileArgs;
// Pairs a pass of the register form's tile.
constexpr int kWarpPairs = 2;
// The ring form: steps in flight a warp, and pairs a pass (an item).
// A slot holds a step's kTileRows weight vectors and its pairs' x vectors, 16 bytes a lane each.
constexpr int kRingStages = 2;
constexpr int kRingPairs = 4;
constexpr int kSlotVectors = kTileRows + kRingPairs;
constexpr size_t kRingBytes = size_t{kRingStages} * kWarps * kSlotVectors * 32 * sizeof(uint4);

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

// A pass's sums (acc: row r, pair b at r * kPairs + b) met over the warp in place and stored: lane
// l receives (row l % kN / kPairs, pair l % kPairs); gate_up's lane takes its up row's sum from
// the lane kFeatures rows on.
template <typename T, bool kGateUp, int kPairs>
__device__ __forceinline__ void store_warp_sums(const TileArgs<T>& a, int64_t n0, const int* list,
                                                int nb, float (&acc)[kTileRows * kPairs]) {
  constexpr int kN = kTileRows * kPairs;
  constexpr int kFeatures = moe::tile_features<kGateUp>();
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t n_out = a.n_out;
  const float sum = warp_sum_transposed(acc);
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

// One pass of a warp's tile (outputs n0 ..; rows: its weight rows) over the pairs list[0, nb),
// nb <= kPairs: run_tile's arithmetic per lane, K split across the warp's lanes alone, the sums met
// by shuffles (no block barrier), so the block's other warps keep loading while this one reduces.
template <typename T, int V, bool kGateUp, int kPairs>
__device__ __forceinline__ void warp_tile_pass(const TileArgs<T>& a,
                                               const T* const (&rows)[kTileRows], int64_t n0,
                                               const int* list, int nb) {
  constexpr int kRows = kTileRows, kN = kRows * kPairs;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t k_dim = a.k_dim;
  const T* xr[kPairs];
#pragma unroll
  for (int b = 0; b < kPairs; ++b)
    xr[b] = a.x + int64_t{list[b < nb ? b : 0] / a.tokens_per_pair} * a.x_stride;
  float acc[kRows][kPairs] = {};
#pragma unroll 1
  for (int64_t c = int64_t{lane} * V; c < k_dim; c += int64_t{32} * V)
    moe::accumulate_vector<T, V>(rows, xr, c, nb, acc);
  store_warp_sums<T, kGateUp, kPairs>(a, n0, list, nb, reinterpret_cast<float(&)[kN]>(acc));
}

// One warp's tile (outputs n0 ..) of weight w for the pairs list[0, n_pairs), kWarpPairs a pass
// (a pass's sums in registers: 8 rows x 2 pairs fit beside the weights' vectors; an expert's
// third pair takes a second pass, its weights then from L2).
template <typename T, int V, bool kGateUp>
__device__ __forceinline__ void run_warp_tile(const TileArgs<T>& a, const T* w, int64_t n0,
                                              const int* list, int n_pairs) {
  const T* rows[kTileRows];
  moe::tile_rows<T, kGateUp>(a, w, n0, rows);
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
  __shared__ moe::ExpertSort s;
  pdl_wait();  // IB_MOE_PDL
  pdl_trigger();
  moe::sort_by_expert(ids, pairs, s);
  constexpr int kFeatures = moe::tile_features<kGateUp>();
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

// An item of the ring form: expert e's pairs list[0, nb) (a pass of at most kRingPairs of them)
// and its tile's first output n0.
struct RingItem {
  int e, nb;
  const int* list;
  int64_t n0;
};

// IB_MOE_WARP_RING: the warp form's work items (tile, expert pass), each warp's steps (item j's
// step st: n = j * ksteps + st) streamed through its ring slots (slot n % kRingStages). An
// expert's pairs go kRingPairs a pass: its first pass an item of every tile, a second (chunks of
// at most 8 tokens route at most 8 pairs to an expert, each token's experts being distinct)
// another item whose weights come again.
template <typename T, bool kGateUp>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    moe_warp_ring_kernel(TileArgs<T> a, const int32_t* ids, int pairs, MoeExpertPtrs weights) {
  constexpr int V = kVec16<T>;
  constexpr int kFeatures = moe::tile_features<kGateUp>();
  extern __shared__ uint4 ring[];  // [kRingStages][kWarps][kSlotVectors][32]
  __shared__ moe::ExpertSort s;
  __shared__ int second[kMoeMaxExperts];  // the experts with a second pass
  __shared__ int n_second;
  pdl_wait();  // IB_MOE_PDL
  pdl_trigger();
  if (threadIdx.x == 0) n_second = 0;
  moe::sort_by_expert(ids, pairs, s);  // (its barriers order n_second's reset)
  // An expert of more than one pass: its pairs in ascending order (the sort's scatter leaves them
  // in whatever order its atomics ran, which differs between blocks), so that every block's
  // passes split the same list the same way.
  for (int i = static_cast<int>(threadIdx.x); i < s.n_distinct; i += kThreads) {
    const int e = s.distinct[i];
    if (s.count[e] <= kRingPairs) continue;
    int* list = s.list + s.start[e];
    for (int a = 1; a < s.count[e]; ++a) {  // insertion sort: at most 8 pairs at <= 8 tokens
      const int v = list[a];
      int b = a;
      for (; b > 0 && list[b - 1] > v; --b) list[b] = list[b - 1];
      list[b] = v;
    }
    second[atomicAdd(&n_second, 1)] = e;
  }
  __syncthreads();
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const auto tiles = static_cast<int>((a.n_out + kFeatures - 1) / kFeatures);
  const int passes = s.n_distinct + n_second;
  const int items = tiles * passes;
  const int first = static_cast<int>(blockIdx.x) * kWarps + warp;
  const int stride = static_cast<int>(gridDim.x) * kWarps;
  const int my_items = first < items ? (items - first + stride - 1) / stride : 0;
  const auto ksteps = static_cast<int>((a.k_dim + 32 * V - 1) / (32 * V));
  const int total = my_items * ksteps;
  const auto item_of = [&](int item) {
    const int pass = item / tiles;
    const bool again = pass >= s.n_distinct;
    const int e = again ? second[pass - s.n_distinct] : s.distinct[pass];
    const int base = again ? kRingPairs : 0;
    return RingItem{e, min(kRingPairs, s.count[e] - base), s.list + s.start[e] + base,
                    int64_t{item % tiles} * kFeatures};
  };
  const auto slot = [&](int u, int v) -> uint4& {  // v: weight row, or kTileRows + pair
    return ring[((u * kWarps + warp) * kSlotVectors + v) * 32 + lane];
  };
  // Step n's copies into slot u: one commit group a step (empty past the end and past K, so that
  // the groups count steps).
  const auto issue = [&](int n, int u) {
    if (n < total) {
      const int j = n / ksteps, st = n - j * ksteps;
      const int64_t c = int64_t{st} * 32 * V + int64_t{lane} * V;
      if (c < a.k_dim) {
        const RingItem it = item_of(first + j * stride);
        const T* rows[kTileRows];
        moe::tile_rows<T, kGateUp>(a, static_cast<const T*>(weights.ptr[it.e]), it.n0, rows);
#pragma unroll
        for (int r = 0; r < kTileRows; ++r) cp_async16(&slot(u, r), rows[r] + c, true);
#pragma unroll
        for (int b = 0; b < kRingPairs; ++b) {
          if (b < it.nb) {
            cp_async16(&slot(u, kTileRows + b),
                       a.x + int64_t{it.list[b] / a.tokens_per_pair} * a.x_stride + c, true);
          }
        }
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int u = 0; u < kRingStages; ++u) issue(u, u);
  float acc[kTileRows * kRingPairs] = {};  // row r, pair b at r * kRingPairs + b
  for (int n = 0; n < total; ++n) {
    const int u = n % kRingStages;
    const int j = n / ksteps, st = n - j * ksteps;
    const RingItem it = item_of(first + j * stride);
    const int64_t c = int64_t{st} * 32 * V + int64_t{lane} * V;
    cp_async_wait<kRingStages - 1>();
    if (c < a.k_dim) {  // the pass's x vectors, then row by row, from the slot
      float xv[kRingPairs][V];
#pragma unroll
      for (int b = 0; b < kRingPairs; ++b) {
        if (b < it.nb) {
          const uint4 raw = slot(u, kTileRows + b);
          const T* xe = reinterpret_cast<const T*>(&raw);
#pragma unroll
          for (int i = 0; i < V; ++i) xv[b][i] = to_f32(xe[i]);
        }
      }
#pragma unroll
      for (int r = 0; r < kTileRows; ++r) {
        const uint4 raw = slot(u, r);
        const T* wv = reinterpret_cast<const T*>(&raw);
        float wf[V];
#pragma unroll
        for (int i = 0; i < V; ++i) wf[i] = to_f32(wv[i]);
#pragma unroll
        for (int b = 0; b < kRingPairs; ++b) {
          if (b >= it.nb) break;
#pragma unroll
          for (int i = 0; i < V; ++i) acc[r * kRingPairs + b] += wf[i] * xv[b][i];
        }
      }
    }
    issue(n + kRingStages, u);  // the slot's bytes are in registers now
    if (st == ksteps - 1) {     // the item's last step
      store_warp_sums<T, kGateUp, kRingPairs>(a, it.n0, it.list, it.nb, acc);
#pragma unroll
      for (int i = 0; i < kTileRows * kRingPairs; ++i) acc[i] = 0.0f;
    }
  }
  cp_async_wait<0>();
}

}  // namespace

void launch_moe_warps(const void* x, const int32_t* ids, int pairs, int k,
                      const MoeExpertPtrs& gate_up, const MoeExpertPtrs& down, bool vec, int64_t d,
                      int64_t f, unsigned slots, int num_sms, bool ring, DType dtype, void* act,
                      float* y, cudaStream_t stream, bool pdl) {
  IB_DISPATCH_FLOAT(dtype, T, {
    constexpr int kV = kVec16<T>;
    constexpr int kFeatures = moe::tile_features<true>();
    const TileArgs<T> gate_args{static_cast<const T*>(x), d,      k, d, f,
                                static_cast<T*>(act),     nullptr};
    const TileArgs<T> down_args{static_cast<const T*>(act), f, 1, f, d, nullptr, y};
    const int64_t gate_items = (f + kFeatures - 1) / kFeatures * slots;
    const int64_t down_items = (d + kTileRows - 1) / kTileRows * slots;
    // kWarps items a block, at most the device's resident blocks.
    const int64_t resident = int64_t{kBlocksPerSm} * std::max(num_sms, 1);
    const auto gate_blocks =
        static_cast<unsigned>(std::min(resident, (gate_items + kWarps - 1) / kWarps));
    const auto down_blocks =
        static_cast<unsigned>(std::min(resident, (down_items + kWarps - 1) / kWarps));
    // The ring form: 16-byte rows, one pass of pairs an expert (at most 8 tokens a chunk).
    if (ring && vec && pairs <= 2 * kRingPairs * k) {
      for (auto* kernel : {moe_warp_ring_kernel<T, true>, moe_warp_ring_kernel<T, false>}) {
        IB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(kRingBytes)),
                      "moe_experts (warp ring)");
        IB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                           cudaSharedmemCarveoutMaxShared),
                      "moe_experts (warp ring)");
      }
      launch_kernel("moe_experts (warp ring)", pdl, moe_warp_ring_kernel<T, true>,
                    dim3(gate_blocks), dim3(kThreads), kRingBytes, stream, gate_args, ids, pairs,
                    gate_up);
      launch_kernel("moe_experts (warp ring)", pdl, moe_warp_ring_kernel<T, false>,
                    dim3(down_blocks), dim3(kThreads), kRingBytes, stream, down_args, ids, pairs,
                    down);
      return;
    }
    auto* gate_kernel = vec ? moe_warp_kernel<T, kV, true> : moe_warp_kernel<T, 1, true>;
    auto* down_kernel = vec ? moe_warp_kernel<T, kV, false> : moe_warp_kernel<T, 1, false>;
    launch_kernel("moe_experts (warps)", pdl, gate_kernel, dim3(gate_blocks), dim3(kThreads), 0,
                  stream, gate_args, ids, pairs, gate_up);
    launch_kernel("moe_experts (warps)", pdl, down_kernel, dim3(down_blocks), dim3(kThreads), 0,
                  stream, down_args, ids, pairs, down);
  });
}

}  // namespace ib::cuda
