// LoRA kernels (backend/ops.h, LoraOps), BGMV style as Punica and S-LoRA gather them: a shrink
// (each token's x times its slot's A rows, every target of the group, fp32 into the workspace)
// and an expand (each output column times the token's slot's B row, scaled and added to the
// projection's output, one rounding). Two launches per group, whatever the mix of adapters, or
// one (IB_LORA_FUSED=1: the expand's blocks wait in the kernel for the shrink's); slot ids never
// leave the device and tokens of slot -1 cost no loads, so they run inside the decode CUDA graphs.
#include <algorithm>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/lora_kernels.h"
#include "backend/cuda/detail/lora_shrink.cuh"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace {

constexpr int kShrinkThreads = kLoraShrinkThreads;
constexpr int kShrinkRows = kLoraShrinkRows;
constexpr int kExpandThreads = 256;  // output columns of an expand block, one a thread
constexpr int kExpandTokens = 8;     // tokens an expand block adds into its columns
// Up to this many tokens the shrink takes one token per block (decode: more blocks in flight);
// above it a tile of kShrinkTile tokens, so the A elements a thread loads serve the tile's
// tokens of one slot (prefill).
constexpr int64_t kShrinkSmallBatch = 16;
constexpr int kShrinkTile = 8;
// Tokens per chunk at most (grid limits: 65,535 expand blocks along y).
constexpr int64_t kMaxChunkTokens = int64_t{1} << 16;

template <typename T, int V, int TT, bool kNorm = false>
__global__ void __launch_bounds__(kShrinkThreads)
    lora_shrink_kernel(const T* __restrict__ x, int64_t k, const int32_t* __restrict__ slot_ids,
                       int64_t tokens, LoraGroupPtrs group, int rank, int num_slots, float* u,
                       const T* __restrict__ gain, float eps, float* zero, int zero_floats,
                       unsigned* sync) {
  lora_shrink_block<T, V, TT, kNorm>(x, k, slot_ids, tokens, group, rank, num_slots, u, blockIdx.x,
                                     blockIdx.y, gain, eps, sync);
  // After the block's pdl_wait: every kernel before this launch has finished.
  if (zero != nullptr && blockIdx.x == 0 && blockIdx.y == 0) {
    for (int i = static_cast<int>(threadIdx.x); i < zero_floats; i += kShrinkThreads)
      zero[i] = 0.0f;
  }
}

// IB_LORA_IN_GEMV=5's lookahead shrink: blocks with row_block < cur_row_blocks are the op's own
// shrink (u = a_g[s] . x); the rest compute the next op's rows, u_next = m_g[s] . x +
// a'_g[s] . x2 (next: m as its a stacks; second: x2 and a').
template <typename T, int V>
__global__ void __launch_bounds__(kShrinkThreads)
    lora_lookahead_kernel(const T* __restrict__ x, int64_t k, const int32_t* __restrict__ slot_ids,
                          int64_t tokens, LoraGroupPtrs cur, LoraGroupPtrs next,
                          LoraShrinkSecond<T> second, int rank, int num_slots, float* u,
                          float* u_next, unsigned cur_row_blocks) {
  if (blockIdx.y < cur_row_blocks) {
    lora_shrink_block<T, V, 1>(x, k, slot_ids, tokens, cur, rank, num_slots, u, blockIdx.x,
                               blockIdx.y);
  } else {
    lora_shrink_block<T, V, 1, false, true>(x, k, slot_ids, tokens, next, rank, num_slots, u_next,
                                            blockIdx.x, blockIdx.y - cur_row_blocks, nullptr, 0.0f,
                                            nullptr, second);
  }
}

// The lookahead matrix of one slot and target (launch_lora_lookahead_matrix): block (kb, rb)
// computes columns [kb 256, +256) (a thread each) of rows [rb 16, +16) of
// m = a_next (R, N) @ (w (N, K) + scale * b (N, R') @ a (R', K)) in fp32. c = a_next b (16 x R')
// first, in shared memory; then a_next's rows staged 64 columns at a time, w's rows read once.
constexpr int kLookRows = 16, kLookCols = 256, kLookStep = 64;
template <typename T>
__global__ void __launch_bounds__(kLookCols)
    lora_lookahead_matrix_kernel(const T* __restrict__ a_next, const T* __restrict__ w,
                                 const T* __restrict__ a, const T* __restrict__ b, float scale,
                                 T* __restrict__ m, int64_t rows, int64_t n_dim, int64_t k_dim,
                                 int64_t rank) {
  __shared__ float c_s[kLookRows * kGemvLoraMaxRank];
  __shared__ float a_s[kLookRows][kLookStep];
  const int64_t r0 = int64_t{blockIdx.y} * kLookRows;
  const int64_t col = int64_t{blockIdx.x} * kLookCols + threadIdx.x;
  for (int64_t e = threadIdx.x; e < kLookRows * rank; e += kLookCols) {
    const int64_t r = r0 + e / rank, j = e % rank;
    float sum = 0.0f;
    if (r < rows) {
      for (int64_t n = 0; n < n_dim; ++n)
        sum += to_f32(a_next[r * n_dim + n]) * to_f32(b[n * rank + j]);
    }
    c_s[e] = sum;
  }
  float acc[kLookRows];
#pragma unroll
  for (int j = 0; j < kLookRows; ++j) acc[j] = 0.0f;
  for (int64_t n0 = 0; n0 < n_dim; n0 += kLookStep) {
    __syncthreads();
    for (int e = threadIdx.x; e < kLookRows * kLookStep; e += kLookCols) {
      const int64_t r = r0 + e / kLookStep, n = n0 + e % kLookStep;
      a_s[e / kLookStep][e % kLookStep] =
          r < rows && n < n_dim ? to_f32(a_next[r * n_dim + n]) : 0.0f;
    }
    __syncthreads();
    if (col >= k_dim) continue;
    const int steps = static_cast<int>(n_dim - n0 < kLookStep ? n_dim - n0 : kLookStep);
    for (int nn = 0; nn < steps; ++nn) {
      const float wv = to_f32(w[(n0 + nn) * k_dim + col]);
#pragma unroll
      for (int j = 0; j < kLookRows; ++j) acc[j] += a_s[j][nn] * wv;
    }
  }
  if (col >= k_dim) return;
  for (int64_t j = 0; j < rank; ++j) {
    const float av = scale * to_f32(a[j * k_dim + col]);
#pragma unroll
    for (int r = 0; r < kLookRows; ++r) acc[r] += c_s[r * rank + j] * av;
  }
#pragma unroll
  for (int r = 0; r < kLookRows; ++r) {
    if (r0 + r < rows) m[(r0 + r) * k_dim + col] = from_f32<T>(acc[r]);
  }
}

// u[i] for the expand: through L2 when the shrink ran in the same launch (IB_LORA_FUSED: another
// block wrote it, and L1 is not coherent), else an ordinary load.
template <bool kFused>
__device__ __forceinline__ float load_u(const float* p) {
  if constexpr (kFused) {
    return __ldcg(p);
  } else {
    return *p;
  }
}

// The expand's dynamic shared memory: the tile's rows of u (kExpandTokens x G R floats).
size_t expand_smem_bytes(int group_rank) {
  return static_cast<size_t>(kExpandTokens) * static_cast<size_t>(group_rank) * sizeof(float);
}

// Block (col_block, tile) of the expand's grid (column blocks of the targets' concatenated N,
// token tiles of kExpandTokens): thread n adds to its column of target g, for each of the tile's
// tokens of a slot s, scales[s] * b_g[s][n] . u_g[t] (fp32) to out[t][row_offset_g + n], rounded
// once. A decode step's expand is latency-bound (measured: ~8 us a launch when each token's slot,
// B row, u and output were loaded one token after another), so the block first stages the tile's
// slots and rows of u in shared memory (u_s: expand_smem_bytes), then every thread loads B's row
// once per run of tokens of one slot and its tile's old outputs all at once.
template <typename T, int V, bool kFused>
__device__ __forceinline__ void expand_block(const float* u, const int32_t* __restrict__ slot_ids,
                                             int64_t tokens, const LoraGroupPtrs& group, int rank,
                                             int num_slots, const float* __restrict__ scales,
                                             T* __restrict__ out, int64_t out_stride,
                                             unsigned col_block, unsigned tile, float* u_s) {
  __shared__ int slot_s[kExpandTokens];
  const int group_rank = group.count * rank;
  const int64_t t0 = int64_t{tile} * kExpandTokens;
  const int nt = static_cast<int>(tokens - t0 < kExpandTokens ? tokens - t0 : kExpandTokens);
  if (threadIdx.x < kExpandTokens) {
    const int s = static_cast<int>(threadIdx.x) < nt ? slot_ids[t0 + threadIdx.x] : -1;
    slot_s[threadIdx.x] = s < num_slots ? s : -1;
  }
  // Under programmatic dependent launch u (the shrink's) is read only after pdl_wait().
  pdl_wait();
  pdl_trigger();
  // Rows of base tokens were never written: staged anyway (unused), one coalesced sweep.
  for (int e = threadIdx.x; e < nt * group_rank; e += kExpandThreads) {
    u_s[e] = load_u<kFused>(u + t0 * group_rank + e);
  }
  __syncthreads();
  int64_t n = int64_t{col_block} * kExpandThreads + threadIdx.x;
  int g = 0;
  if (group.count > 1 && n >= group.n[0]) {
    n -= group.n[0];
    g = 1;
    if (group.count > 2 && n >= group.n[1]) {
      n -= group.n[1];
      g = 2;
    }
  }
  const int64_t n_g = lora_pick(group.n, g);
  if (n >= n_g) return;
  const T* b = static_cast<const T*>(lora_pick(group.b, g));
  T* col = out + lora_pick(group.row_offset, g) + n;
  float acc[kExpandTokens];
#pragma unroll
  for (int i = 0; i < kExpandTokens; ++i) acc[i] = 0.0f;
#pragma unroll 4
  for (int r = 0; r < rank; r += V) {
    float bv[V];
    int cur = -1;  // the slot whose B elements bv holds
#pragma unroll
    for (int i = 0; i < kExpandTokens; ++i) {
      const int s = slot_s[i];
      if (s < 0) continue;
      if (s != cur) {
        cur = s;
        lora_load_f32<T, V>(b + (int64_t{s} * n_g + n) * rank + r, bv);
      }
      const float* ut = u_s + i * group_rank + g * rank + r;
#pragma unroll
      for (int v = 0; v < V; ++v) acc[i] += bv[v] * ut[v];
    }
  }
  // The old outputs and the scales first (independent loads), then the stores.
  float old[kExpandTokens], scale[kExpandTokens];
#pragma unroll
  for (int i = 0; i < kExpandTokens; ++i) {
    const int s = slot_s[i];
    old[i] = s >= 0 ? to_f32(col[(t0 + i) * out_stride]) : 0.0f;
    scale[i] = s >= 0 ? scales[s] : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kExpandTokens; ++i) {
    if (slot_s[i] >= 0) col[(t0 + i) * out_stride] = from_f32<T>(old[i] + scale[i] * acc[i]);
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(kExpandThreads)
    lora_expand_kernel(const float* u, const int32_t* __restrict__ slot_ids, int64_t tokens,
                       LoraGroupPtrs group, int rank, int num_slots,
                       const float* __restrict__ scales, T* __restrict__ out, int64_t out_stride) {
  extern __shared__ float expand_u_s[];
  expand_block<T, V, false>(u, slot_ids, tokens, group, rank, num_slots, scales, out, out_stride,
                            blockIdx.x, blockIdx.y, expand_u_s);
}

// IB_LORA_FUSED=1: the shrink and the expand in one launch (one kernel boundary less per group).
// Each block draws a ticket (counters[0]) in the order blocks start: the first
// shrink_tiles x shrink_row_blocks tickets run the shrink's blocks and count themselves done
// (counters[1], after a fence that publishes their rows of u), the rest run the expand's blocks
// once every shrink block is done. A block holding an expand ticket started after every shrink
// ticket was drawn, by blocks already running that wait on nothing, so the wait always ends.
// The last block to finish (counters[2]) sets the three counters back to 0 for the next launch.
template <typename T, int V, int TT>
__global__ void __launch_bounds__(kShrinkThreads)
    lora_fused_kernel(const T* __restrict__ x, int64_t k, const int32_t* __restrict__ slot_ids,
                      int64_t tokens, LoraGroupPtrs group, int rank, int num_slots, float* u,
                      const float* __restrict__ scales, T* __restrict__ out, int64_t out_stride,
                      unsigned shrink_tiles, unsigned shrink_row_blocks, unsigned expand_col_blocks,
                      unsigned* counters) {
  static_assert(kShrinkThreads == kExpandThreads, "one block size for both halves");
  __shared__ unsigned ticket;
  if (threadIdx.x == 0) ticket = atomicAdd(counters, 1u);
  __syncthreads();
  const unsigned b = ticket;
  const unsigned num_shrink = shrink_tiles * shrink_row_blocks;
  if (b < num_shrink) {
    lora_shrink_block<T, V, TT>(x, k, slot_ids, tokens, group, rank, num_slots, u, b % shrink_tiles,
                                b / shrink_tiles);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(counters + 1, 1u);
  } else {
    if (threadIdx.x == 0) {
      while (*static_cast<volatile unsigned*>(counters + 1) < num_shrink) __nanosleep(64);
      __threadfence();
    }
    __syncthreads();
    const unsigned e = b - num_shrink;
    extern __shared__ float fused_u_s[];
    expand_block<T, V, true>(u, slot_ids, tokens, group, rank, num_slots, scales, out, out_stride,
                             e % expand_col_blocks, e / expand_col_blocks, fused_u_s);
  }
  if (threadIdx.x == 0 && atomicAdd(counters + 2, 1u) == gridDim.x - 1) {
    counters[0] = 0;
    counters[1] = 0;
    counters[2] = 0;
  }
}

// Past the default 48 KB of dynamic shared memory only at ranks above 170 in a group of three:
// opted in per kernel.
template <typename Kernel>
void allow_expand_smem(Kernel* kernel, size_t smem) {
  if (smem > 48 * 1024) {
    IB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)),
                  "lora_apply");
  }
}

unsigned blocks_for(int64_t n, int64_t per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

// The shrink's token tile: one token per block up to kShrinkSmallBatch tokens, kShrinkTile above.
int shrink_tile(int64_t tokens) {
  return tokens <= kShrinkSmallBatch ? 1 : kShrinkTile;
}

template <typename T, int V>
void launch_shrink(const T* x, int64_t k, const int32_t* slot_ids, int64_t tokens,
                   const LoraGroupPtrs& group, int rank, int num_slots, float* u,
                   cudaStream_t stream, bool pdl, const LoraShrinkNorm* norm = nullptr,
                   float* zero = nullptr, int zero_floats = 0, unsigned* sync = nullptr) {
  const unsigned rows = blocks_for(int64_t{group.count} * rank, kShrinkRows);
  IB_ASSERT(sync == nullptr || norm != nullptr || shrink_tile(tokens) == 1,
            "lora shrink: a flagged shrink takes one token a block");
  if (norm != nullptr) {
    const T* gain = norm->gain != nullptr ? norm->gain->as<const T>() : nullptr;
    launch_kernel("lora shrink (norm)", pdl, lora_shrink_kernel<T, V, 1, true>,
                  dim3(blocks_for(tokens, 1), rows), dim3(kShrinkThreads), 0, stream, x, k,
                  slot_ids, tokens, group, rank, num_slots, u, gain, norm->eps, zero, zero_floats,
                  sync);
  } else if (shrink_tile(tokens) == 1) {
    launch_kernel("lora_apply shrink", pdl, lora_shrink_kernel<T, V, 1>,
                  dim3(blocks_for(tokens, 1), rows), dim3(kShrinkThreads), 0, stream, x, k,
                  slot_ids, tokens, group, rank, num_slots, u, nullptr, 0.0f, zero, zero_floats,
                  sync);
  } else {
    launch_kernel("lora_apply shrink", pdl, lora_shrink_kernel<T, V, kShrinkTile>,
                  dim3(blocks_for(tokens, kShrinkTile), rows), dim3(kShrinkThreads), 0, stream, x,
                  k, slot_ids, tokens, group, rank, num_slots, u, nullptr, 0.0f, zero, zero_floats,
                  nullptr);
  }
}

// Whether the 16-byte kernels apply: K and R multiples of a vector, every pointer aligned.
template <typename T>
bool shrink_vectorized(const Tensor& x, const LoraGroupPtrs& group, const T* gain) {
  bool ok =
      x.row_size() % kVec16<T> == 0 && aligned16(x.data) && (gain == nullptr || aligned16(gain));
  for (int g = 0; g < group.count; ++g) ok = ok && aligned16(group.a[g]);
  return ok;
}

template <typename T>
bool expand_vectorized(int64_t rank, const LoraGroupPtrs& group, const void* u) {
  bool ok = rank % kVec16<T> == 0 && aligned16(u);
  for (int g = 0; g < group.count; ++g) ok = ok && aligned16(group.b[g]);
  return ok;
}

template <typename T>
void launch_expand(const float* u, const int32_t* ids, int64_t tokens, const LoraGroupPtrs& group,
                   int rank, int num_slots, const float* scales, T* out, int64_t out_stride,
                   cudaStream_t stream, bool pdl) {
  int64_t n_total = 0;
  for (int g = 0; g < group.count; ++g) n_total += group.n[g];
  const size_t smem = expand_smem_bytes(group.count * rank);
  const dim3 grid(blocks_for(n_total, kExpandThreads), blocks_for(tokens, kExpandTokens));
  if (expand_vectorized<T>(rank, group, u)) {
    allow_expand_smem(lora_expand_kernel<T, kVec16<T>>, smem);
    launch_kernel("lora_apply expand", pdl, lora_expand_kernel<T, kVec16<T>>, grid,
                  dim3(kExpandThreads), smem, stream, u, ids, tokens, group, rank, num_slots,
                  scales, out, out_stride);
  } else {
    allow_expand_smem(lora_expand_kernel<T, 1>, smem);
    launch_kernel("lora_apply expand", pdl, lora_expand_kernel<T, 1>, grid, dim3(kExpandThreads),
                  smem, stream, u, ids, tokens, group, rank, num_slots, scales, out, out_stride);
  }
}

}  // namespace

int64_t lora_chunk_tokens(int64_t group_rank, size_t workspace_bytes) {
  const int64_t per_token = std::max<int64_t>(group_rank, 1) * static_cast<int64_t>(sizeof(float));
  return std::min(static_cast<int64_t>(workspace_bytes) / per_token, kMaxChunkTokens);
}

unsigned lora_shrink_blocks(int64_t tokens, int count, int64_t rank) {
  return blocks_for(tokens, 1) * blocks_for(int64_t{count} * rank, kShrinkRows);
}

void launch_lora_shrink(const Tensor& x, const LoraShrinkNorm* norm, const Tensor& slot_ids,
                        const LoraGroupPtrs& group, int64_t rank, int64_t num_slots, float* u,
                        cudaStream_t stream, bool pdl, float* zero, int64_t zero_floats,
                        unsigned* sync) {
  const int64_t t = x.rows(), k = x.row_size();
  if (t == 0) return;
  IB_DISPATCH_FLOAT(x.dtype, T, {
    const T* gain = norm != nullptr && norm->gain != nullptr ? norm->gain->as<const T>() : nullptr;
    const auto r = static_cast<int>(rank);
    const auto s = static_cast<int>(num_slots);
    const int32_t* ids = slot_ids.as<const int32_t>();
    const auto zn = static_cast<int>(zero_floats);
    if (shrink_vectorized<T>(x, group, gain)) {
      launch_shrink<T, kVec16<T>>(x.as<const T>(), k, ids, t, group, r, s, u, stream, pdl, norm,
                                  zero, zn, sync);
    } else {
      launch_shrink<T, 1>(x.as<const T>(), k, ids, t, group, r, s, u, stream, pdl, norm, zero, zn,
                          sync);
    }
  });
}

void launch_lora_lookahead(const Tensor& x, const Tensor& slot_ids, const LoraGroupPtrs& cur,
                           const LoraGroupPtrs& next_m, const Tensor& x2,
                           const LoraGroupPtrs& next_a, int64_t rank, int64_t num_slots, float* u,
                           float* u_next, cudaStream_t stream, bool pdl) {
  const int64_t t = x.rows(), k = x.row_size();
  if (t == 0) return;
  IB_ASSERT(t <= kShrinkSmallBatch && x2.rows() == t && x2.dtype == x.dtype &&
                next_m.count == next_a.count,
            "lora lookahead: one token a block, x2 (T, K2) in x's dtype, a next a' per m");
  IB_DISPATCH_FLOAT(x.dtype, T, {
    LoraShrinkSecond<T> second;
    second.x = x2.as<const T>();
    second.k = x2.row_size();
    for (int g = 0; g < next_a.count; ++g) second.a[g] = next_a.a[g];
    const auto r = static_cast<int>(rank);
    const unsigned cur_rows = blocks_for(int64_t{cur.count} * rank, kShrinkRows);
    const dim3 grid(blocks_for(t, 1),
                    cur_rows + blocks_for(int64_t{next_m.count} * rank, kShrinkRows));
    const bool vec = shrink_vectorized<T>(x, cur, nullptr) &&
                     shrink_vectorized<T>(x, next_m, nullptr) &&
                     shrink_vectorized<T>(x2, next_a, nullptr);
    const int32_t* ids = slot_ids.as<const int32_t>();
    const auto s = static_cast<int>(num_slots);
    if (vec) {
      launch_kernel("lora lookahead", pdl, lora_lookahead_kernel<T, kVec16<T>>, grid,
                    dim3(kShrinkThreads), 0, stream, x.as<const T>(), k, ids, t, cur, next_m,
                    second, r, s, u, u_next, cur_rows);
    } else {
      launch_kernel("lora lookahead", pdl, lora_lookahead_kernel<T, 1>, grid, dim3(kShrinkThreads),
                    0, stream, x.as<const T>(), k, ids, t, cur, next_m, second, r, s, u, u_next,
                    cur_rows);
    }
  });
}

void launch_lora_lookahead_matrix(const Tensor& a_next, const Tensor& w, const Tensor& a,
                                  const Tensor& b, float scale, Tensor m, cudaStream_t stream) {
  const int64_t rows = a_next.rows(), n = a_next.row_size(), k = w.row_size(), r = a.rows();
  IB_ASSERT(w.rows() == n && a.row_size() == k && b.rows() == n && b.row_size() == r &&
                m.rows() == rows && m.row_size() == k && r <= kGemvLoraMaxRank,
            "lora lookahead matrix: a_next (R, N), w (N, K), a (R', K), b (N, R'), m (R, K)");
  if (rows == 0 || k == 0) return;
  IB_DISPATCH_FLOAT(m.dtype, T, {
    const dim3 grid(blocks_for(k, kLookCols), blocks_for(rows, kLookRows));
    lora_lookahead_matrix_kernel<T>
        <<<grid, kLookCols, 0, stream>>>(a_next.as<const T>(), w.as<const T>(), a.as<const T>(),
                                         b.as<const T>(), scale, m.as<T>(), rows, n, k, r);
    IB_CUDA_CHECK_LAUNCH("lora lookahead matrix");
  });
}

void launch_lora_expand(const float* u, const Tensor& slot_ids, const LoraGroupPtrs& group,
                        int64_t rank, int64_t num_slots, const Tensor& scales, Tensor out,
                        cudaStream_t stream, bool pdl) {
  const int64_t t = out.rows();
  if (t == 0) return;
  IB_DISPATCH_FLOAT(out.dtype, T, {
    launch_expand<T>(u, slot_ids.as<const int32_t>(), t, group, static_cast<int>(rank),
                     static_cast<int>(num_slots), scales.as<const float>(), out.as<T>(),
                     out.row_size(), stream, pdl);
  });
}

void launch_lora_apply(const Tensor& x, const Tensor& slot_ids, const LoraGroupPtrs& group,
                       int64_t rank, int64_t num_slots, const Tensor& scales, void* workspace,
                       size_t workspace_bytes, unsigned* fused_counters, Tensor out,
                       cudaStream_t stream, bool pdl) {
  const int64_t t = x.rows(), k = x.row_size();
  if (t == 0) return;
  int64_t n_total = 0;
  for (int g = 0; g < group.count; ++g) n_total += group.n[g];
  const int64_t chunk = lora_chunk_tokens(group.count * rank, workspace_bytes);
  IB_ASSERT(chunk >= 1, "lora_apply: the workspace holds no token's shrunk rows");
  auto* u = static_cast<float*>(workspace);
  const auto r = static_cast<int>(rank);
  const auto s = static_cast<int>(num_slots);
  const int64_t out_stride = out.row_size();
  IB_DISPATCH_FLOAT(x.dtype, T, {
    constexpr int kV = kVec16<T>;
    const bool shrink_vec = shrink_vectorized<T>(x, group, nullptr);
    const bool expand_vec = expand_vectorized<T>(rank, group, workspace);
    const unsigned row_blocks = blocks_for(int64_t{group.count} * rank, kShrinkRows);
    const size_t smem = expand_smem_bytes(group.count * r);
    const unsigned col_blocks = blocks_for(n_total, kExpandThreads);
    for (int64_t t0 = 0; t0 < t; t0 += chunk) {
      const int64_t tc = std::min(chunk, t - t0);
      const T* xc = x.as<const T>() + t0 * k;
      const int32_t* ids = slot_ids.as<const int32_t>() + t0;
      T* oc = out.as<T>() + t0 * out_stride;
      const float* sc = scales.as<const float>();
      if (fused_counters != nullptr && shrink_vec && expand_vec) {
        const int tile = shrink_tile(tc);
        const unsigned tiles = blocks_for(tc, tile);
        const unsigned blocks = tiles * row_blocks + col_blocks * blocks_for(tc, kExpandTokens);
        if (tile == 1) {
          allow_expand_smem(lora_fused_kernel<T, kV, 1>, smem);
          lora_fused_kernel<T, kV, 1><<<blocks, kShrinkThreads, smem, stream>>>(
              xc, k, ids, tc, group, r, s, u, sc, oc, out_stride, tiles, row_blocks, col_blocks,
              fused_counters);
        } else {
          allow_expand_smem(lora_fused_kernel<T, kV, kShrinkTile>, smem);
          lora_fused_kernel<T, kV, kShrinkTile><<<blocks, kShrinkThreads, smem, stream>>>(
              xc, k, ids, tc, group, r, s, u, sc, oc, out_stride, tiles, row_blocks, col_blocks,
              fused_counters);
        }
        IB_CUDA_CHECK_LAUNCH("lora_apply (fused)");
        continue;
      }
      if (shrink_vec) {
        launch_shrink<T, kV>(xc, k, ids, tc, group, r, s, u, stream, pdl);
      } else {
        launch_shrink<T, 1>(xc, k, ids, tc, group, r, s, u, stream, pdl);
      }
      launch_expand<T>(u, ids, tc, group, r, s, sc, oc, out_stride, stream, pdl);
    }
  });
}

}  // namespace ib::cuda
