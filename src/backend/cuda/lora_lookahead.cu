// The lookahead shrink with K split over a thread-block cluster (IB_LORA_LOOK_SPLIT; lora.cu's
// launch_lora_lookahead calls it). lora.cu's lookahead kernel gives each block one token, so with
// one adapter the 8 tokens of a decode step read their slot's rows 8 times: down's launch reads
// 64 rows of 14,336 (its own 16 and q/k/v's 48 lookahead rows) eight times, ~18 MB of L2 traffic
// for 1.8 MB of rows. Here each block takes kRows rows for every token of the step and 1/split
// of the row's K, x then x2 as one range of k + k2 (the next op's rows: m . x + a' . x2): the
// rows are loaded once for each distinct slot among the tokens (once for one adapter), before the
// PDL wait (they are weights), and only x waits. The split blocks' sums meet in the cluster's
// distributed shared memory, added by the leader block in rank order: the same bits every run.
#include <cooperative_groups.h>

#include "backend/cuda/detail/carveout.h"
#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/lora_kernels.h"
#include "backend/cuda/detail/lora_shrink.cuh"
#include "backend/cuda/detail/mma.cuh"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 4;    // rows of the group's G x R a block computes
constexpr int kTokens = 8;  // tokens at most: kRows x kTokens sums, one a lane after the reduction
constexpr int kChunks = 2;  // 16-byte vectors a thread loads per row and token in one pass
static_assert(kRows * kTokens == 32, "the warp's transposed reduction leaves one sum a lane");
// Shared memory for x: a 16-byte vector per thread, chunk and token.
constexpr size_t kSmemBytesPerToken = size_t{kChunks} * kThreads * 16;

// a . x over one 16-byte vector of each, in fp32.
template <typename T>
__device__ __forceinline__ float dot16(const uint4& a, const uint4& x) {
  const T* ae = reinterpret_cast<const T*>(&a);
  const T* xe = reinterpret_cast<const T*>(&x);
  float s = 0.0f;
#pragma unroll
  for (int v = 0; v < kVec16<T>; ++v) s = fmaf(to_f32(ae[v]), to_f32(xe[v]), s);
  return s;
}

// The warp's sums of v[0..2 O): lane l returns the sum over the warp's lanes of v[l] (O = 16).
// Each round halves the values a lane holds: the lane keeps one half (the upper where its bit O
// is set) and adds its partner's of that half; constant indices, so v stays in registers.
template <int O>
__device__ __forceinline__ float warp_transposed_sum(float (&v)[32], int lane) {
  const bool upper = (lane & O) != 0;
#pragma unroll
  for (int i = 0; i < O; ++i) {
    const float send = upper ? v[i] : v[i + O];
    const float keep = upper ? v[i + O] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
  }
  if constexpr (O > 1) {
    return warp_transposed_sum<O / 2>(v, lane);
  } else {
    return v[0];
  }
}

// Block (split, row block) of a cluster of `split` blocks along x. Row blocks below
// cur_row_blocks are the op's own rows (a_g[s] . x[t] into u), the rest the next op's
// (m_g[s] . x[t] + a'_g[s] . x2[t] into u_next, K' = k + k2). Block `split` sums its
// [split * span, +span) of K' for every token; tokens of slot -1 are left unwritten.
template <typename T>
__global__ void __launch_bounds__(kThreads, 2)
    lora_lookahead_split_kernel(const T* __restrict__ x, int64_t k, const T* __restrict__ x2,
                                int64_t k2, const int32_t* __restrict__ slot_ids, int tokens,
                                LoraGroupPtrs cur, LoraGroupPtrs next, LoraShrinkSecond<T> second,
                                int rank, int num_slots, float* u, float* u_next,
                                unsigned cur_row_blocks) {
  constexpr int V = kVec16<T>;
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned split = cluster.block_rank(), splits = cluster.num_blocks();
  const bool is_cur = blockIdx.y < cur_row_blocks;
  const int group_rank = (is_cur ? cur.count : next.count) * rank;
  const int row0 = static_cast<int>(is_cur ? blockIdx.y : blockIdx.y - cur_row_blocks) * kRows;
  const int64_t kk = is_cur ? k : k + k2;
  const int64_t span = ((kk + splits - 1) / splits + V - 1) / V * V;
  const int64_t c0 = int64_t{split} * span;
  const int64_t c1 = c0 + span < kk ? c0 + span : kk;
  // Slot 0's row of each of the block's rows, over x (a1) and over x2 (a2); null past the end.
  const T* a1[kRows];
  const T* a2[kRows];
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    const int row = row0 + j, g = row / rank, r = row % rank;
    const bool valid = row < group_rank;
    a1[j] = valid ? static_cast<const T*>(is_cur ? lora_pick(cur.a, g) : lora_pick(next.a, g)) +
                        int64_t{r} * k
                  : nullptr;
    a2[j] = valid && !is_cur ? static_cast<const T*>(lora_pick(second.a, g)) + int64_t{r} * k2
                             : nullptr;
  }
  // Slot ids were uploaded before the step's first kernel: read before the wait.
  int sl[kTokens];
  unsigned valid_mask = 0;
#pragma unroll
  for (int i = 0; i < kTokens; ++i) {
    const int s = i < tokens ? slot_ids[i] : -1;
    sl[i] = s >= 0 && s < num_slots ? s : -1;
    if (sl[i] >= 0) valid_mask |= 1u << i;
  }
  // The slot of the lowest token in mask (mask not zero), by selects.
  const auto lowest_slot = [&](unsigned mask) {
    const int low = __ffs(static_cast<int>(mask)) - 1;
    int s = -1;
#pragma unroll
    for (int i = 0; i < kTokens; ++i) s = i == low ? sl[i] : s;
    return s;
  };
  const int64_t first = c0 + int64_t{threadIdx.x} * V;
  const int64_t pass_stride = int64_t{kThreads} * V * kChunks;
  uint4 ar[kRows][kChunks];
  // Slot s's row j at K' offset c (c below c1), or null.
  const auto row_at = [&](int j, int s, int64_t c) -> const T* {
    return c >= c1 || a1[j] == nullptr ? nullptr
           : c < k                     ? a1[j] + int64_t{s} * rank * k + c
                                       : a2[j] + int64_t{s} * rank * k2 + (c - k);
  };
  const auto load_rows = [&](int s, int64_t base) {
#pragma unroll
    for (int ch = 0; ch < kChunks; ++ch) {
#pragma unroll
      for (int j = 0; j < kRows; ++j) {
        const T* p = row_at(j, s, base + int64_t{ch} * kThreads * V);
        ar[j][ch] = p != nullptr ? *reinterpret_cast<const uint4*>(p) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  const int s0 = valid_mask != 0 ? lowest_slot(valid_mask) : -1;
  // The first slot's rows of the first pass come before the wait: weights, constant in a step.
  // Other slots' rows of that pass go to L2 meanwhile (loaded after the wait, slot by slot).
  if (s0 >= 0) load_rows(s0, first);
#pragma unroll
  for (int i = 0; i < kTokens; ++i) {
    if (sl[i] < 0 || sl[i] == s0) continue;
#pragma unroll
    for (int ch = 0; ch < kChunks; ++ch) {
#pragma unroll
      for (int j = 0; j < kRows; ++j) {
        const T* p = row_at(j, sl[i], first + int64_t{ch} * kThreads * V);
        if (p != nullptr) prefetch_l2(p);
      }
    }
  }
  pdl_wait();
  pdl_trigger();
  float acc[kRows * kTokens];  // [row j * kTokens + token i]
#pragma unroll
  for (int e = 0; e < kRows * kTokens; ++e) acc[e] = 0.0f;
  // x's vectors land in shared memory by cp.async (no registers held while they fly), each
  // thread's own: it waits for its copies only.
  extern __shared__ uint4 xs[];  // [token][chunk][thread], tokens below `tokens`
  for (int64_t base = first; base < c1 && s0 >= 0; base += pass_stride) {
#pragma unroll
    for (int i = 0; i < kTokens; ++i) {
      if (((valid_mask >> i) & 1u) == 0) continue;
#pragma unroll
      for (int ch = 0; ch < kChunks; ++ch) {
        const int64_t c = base + int64_t{ch} * kThreads * V;
        const T* p = c >= c1 ? x : c < k ? x + i * k + c : x2 + i * k2 + (c - k);
        cp_async16(&xs[(i * kChunks + ch) * kThreads + threadIdx.x], p, c < c1);
      }
    }
    cp_async_commit();
    if (base != first) load_rows(s0, base);
    cp_async_wait<0>();
    unsigned todo = valid_mask;
    int s = s0;
    while (true) {  // each distinct slot among the tokens in turn: one for one adapter
      unsigned mine = 0;
#pragma unroll
      for (int i = 0; i < kTokens; ++i) {
        if (sl[i] == s) mine |= 1u << i;
      }
#pragma unroll
      for (int i = 0; i < kTokens; ++i) {
        if (((mine >> i) & 1u) == 0) continue;
#pragma unroll
        for (int ch = 0; ch < kChunks; ++ch) {
          const uint4 xv = xs[(i * kChunks + ch) * kThreads + threadIdx.x];
#pragma unroll
          for (int j = 0; j < kRows; ++j) acc[j * kTokens + i] += dot16<T>(ar[j][ch], xv);
        }
      }
      todo &= ~mine;
      if (todo == 0) break;
      s = lowest_slot(todo);
      load_rows(s, base);
    }
  }
  // The block's sums: each warp's, transposed to a sum a lane, then the warps' in shared memory.
  __shared__ float warp_part[kWarps][32];
  __shared__ float block_part[32];
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  warp_part[warp][lane] = warp_transposed_sum<16>(acc, lane);
  __syncthreads();
  if (warp == 0) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += warp_part[w][lane];
    block_part[lane] = sum;
  }
  cluster.sync();
  if (split == 0 && warp == 0) {
    float total = 0.0f;
    for (unsigned b = 0; b < splits; ++b) total += cluster.map_shared_rank(&block_part[0], b)[lane];
    const int j = lane / kTokens, i = lane % kTokens, row = row0 + j;
    if (row < group_rank && ((valid_mask >> i) & 1u) != 0)
      (is_cur ? u : u_next)[int64_t{i} * group_rank + row] = total;
  }
  cluster.sync();  // no block leaves while the leader reads its shared memory
}

}  // namespace

bool lora_lookahead_split_fits(int64_t tokens, int split) {
  return tokens >= 1 && tokens <= kTokens && (split == 2 || split == 4 || split == 8);
}

void launch_lora_lookahead_split(const Tensor& x, const Tensor& slot_ids, const LoraGroupPtrs& cur,
                                 const LoraGroupPtrs& next_m, const Tensor& x2,
                                 const LoraGroupPtrs& next_a, int64_t rank, int64_t num_slots,
                                 float* u, float* u_next, int split, cudaStream_t stream,
                                 bool pdl) {
  const int64_t t = x.rows();
  IB_ASSERT(lora_lookahead_split_fits(t, split) && x2.rows() == t && x2.dtype == x.dtype &&
                next_m.count == next_a.count,
            "lora lookahead split: 1 to 8 tokens, split 2, 4 or 8, x2 (T, K2) in x's dtype");
  const auto blocks_for = [](int64_t n) { return static_cast<unsigned>((n + kRows - 1) / kRows); };
  const unsigned cur_rows = blocks_for(int64_t{cur.count} * rank);
  const dim3 grid(static_cast<unsigned>(split),
                  cur_rows + blocks_for(int64_t{next_m.count} * rank));
  IB_DISPATCH_FLOAT(x.dtype, T, {
    LoraShrinkSecond<T> second;
    for (int g = 0; g < next_a.count; ++g) second.a[g] = next_a.a[g];
    const auto kernel = lora_lookahead_split_kernel<T>;
    const size_t smem = static_cast<size_t>(t) * kSmemBytesPerToken;
    if (smem > 48 * 1024) {  // above the default, opted in per kernel (as lora.cu's expand)
      IB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)),
                    "lora lookahead split");
    }
    if (smem_carveout() >= 0) apply_smem_carveout(reinterpret_cast<const void*>(kernel));
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    cudaLaunchAttribute attribute[2];
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = static_cast<unsigned>(split);
    attribute[0].val.clusterDim.y = 1;
    attribute[0].val.clusterDim.z = 1;
    attribute[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[1].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = pdl ? 2 : 1;
    IB_CUDA_CHECK(
        cudaLaunchKernelEx(&config, kernel, x.as<const T>(), x.row_size(), x2.as<const T>(),
                           x2.row_size(), slot_ids.as<const int32_t>(), static_cast<int>(t), cur,
                           next_m, second, static_cast<int>(rank), static_cast<int>(num_slots), u,
                           u_next, cur_rows),
        "lora lookahead split");
  });
}

}  // namespace ib::cuda
