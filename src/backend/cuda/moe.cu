// Mixture-of-experts kernels (backend/ops.h, MoeOps): the router's softmax and top-k, a warp per
// token, as the CPU op computes it; then the experts over token chunks, grouped by expert on
// the device (a grid row per expert routed to; each block finds the pairs routed to its expert, so
// only the selected experts' weights are read, each row once per group of kTokensPerPass pairs),
// and a combine that adds the experts of each token in ascending id order. Expert ids never leave
// the device.
#include <algorithm>
#include <climits>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/moe_device.cuh"
#include "backend/cuda/detail/moe_kernels.h"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace {

using moe::kMaxChunkPairs;
using moe::load_vec;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// Pairs a warp multiplies against one pass over its weight rows.
constexpr int kTokensPerPass = 8;

// ---- routing ----

// A warp per token. p_i = expf(l_i - max) / sum, the sum added in expert order (as the CPU op
// and the one-thread kernel before this one did, so the ids and weights equal the CPU's). Expert
// j + 1 is the largest score strictly after expert j in the order (score descending, id
// ascending): the CPU's partial_sort order, ties to the lower id, found by a warp reduction over
// each lane's best. The score is p, or 0 outside the groups kept (DeepSeek's group-limited
// routing, num_groups > 1: the topk_groups groups of the largest p, ties to the lower group, as
// the CPU op keeps them; lane 0 picks them).
constexpr int kRouteWarps = 4;
constexpr int kRoutePerLane = kMoeMaxExperts / 32;

// (pa, a) comes before (pb, b): the larger score, then the lower id.
__device__ __forceinline__ bool route_before(float pa, int a, float pb, int b) {
  return pa > pb || (pa == pb && a < b);
}

__global__ void __launch_bounds__(kRouteWarps * 32)
    moe_route_kernel(const float* logits, int64_t tokens, int e, int k, MoeRouteParams rp,
                     int32_t* ids, float* weights, unsigned long long* counts) {
  __shared__ float p_s[kRouteWarps][kMoeMaxExperts];
  __shared__ float group_best_s[kRouteWarps][kMoeMaxGroups];
  __shared__ unsigned long long kept_groups_s[kRouteWarps];
  pdl_wait();  // IB_MOE_PDL: every MoE kernel waits first, then lets the next one launch
  pdl_trigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = blockIdx.x * int64_t{kRouteWarps} + warp;
  if (t >= tokens) return;  // the whole warp: no block-wide barrier follows
  const float* l = logits + t * e;
  float* p_w = p_s[warp];
  float lv[kRoutePerLane];
  float max_logit = -INFINITY;
#pragma unroll
  for (int c = 0; c < kRoutePerLane; ++c) {
    const int i = lane + 32 * c;
    lv[c] = i < e ? l[i] : -INFINITY;
    max_logit = fmaxf(max_logit, lv[c]);
  }
  max_logit = warp_max(max_logit);
#pragma unroll
  for (int c = 0; c < kRoutePerLane; ++c) {
    const int i = lane + 32 * c;
    if (i < e) p_w[i] = expf(lv[c] - max_logit);
  }
  __syncwarp();
  float sum = 0.0f;
  if (lane == 0) {
    for (int i = 0; i < e; ++i) sum += p_w[i];
  }
  sum = __shfl_sync(0xffffffffu, sum, 0);
  float pv[kRoutePerLane];
#pragma unroll
  for (int c = 0; c < kRoutePerLane; ++c) {
    const int i = lane + 32 * c;
    pv[c] = i < e ? p_w[i] / sum : -INFINITY;
  }
  // The groups kept, a bit each.
  unsigned long long kept_groups = ~0ull;
  const int per_group = rp.num_groups > 1 ? e / rp.num_groups : e;
  if (rp.num_groups > 1) {
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kRoutePerLane; ++c) {
      const int i = lane + 32 * c;
      if (i < e) p_w[i] = pv[c];
    }
    __syncwarp();
    for (int g = lane; g < rp.num_groups; g += 32) {
      float best = -1.0f;
      for (int i = g * per_group; i < (g + 1) * per_group; ++i) best = fmaxf(best, p_w[i]);
      group_best_s[warp][g] = best;
    }
    __syncwarp();
    if (lane == 0) {
      const float* group_best = group_best_s[warp];
      unsigned long long kept = 0;
      float prev = INFINITY;
      int prev_g = -1;
      for (int j = 0; j < rp.topk_groups; ++j) {
        int pick = -1;
        float pick_best = -2.0f;
        for (int g = 0; g < rp.num_groups; ++g) {
          const float b = group_best[g];
          const bool after = b < prev || (b == prev && g > prev_g);
          if (after && b > pick_best) {
            pick = g;
            pick_best = b;
          }
        }
        if (pick < 0) pick = (prev_g + 1) % rp.num_groups;  // NaN logits: any group
        kept |= 1ull << pick;
        prev = pick_best;
        prev_g = pick;
      }
      kept_groups_s[warp] = kept;
    }
    __syncwarp();
    kept_groups = kept_groups_s[warp];
  }
  float score[kRoutePerLane];
#pragma unroll
  for (int c = 0; c < kRoutePerLane; ++c) {
    const int i = lane + 32 * c;
    score[c] = i < e && !((kept_groups >> (i / per_group)) & 1) ? 0.0f : pv[c];
  }
  float kept = 0.0f, prev_p = INFINITY, my_p = 0.0f;
  int prev_id = -1, my_id = 0;
  for (int j = 0; j < k; ++j) {
    // This lane's best after the previous pick (NaN never wins), then the warp's.
    float best_p = -1.0f;
    int best = INT_MAX;
#pragma unroll
    for (int c = 0; c < kRoutePerLane; ++c) {
      const int i = lane + 32 * c;
      const float pi = score[c];
      const bool after = pi < prev_p || (pi == prev_p && i > prev_id);
      if (i < e && after && pi > best_p) {
        best = i;
        best_p = pi;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other_p = __shfl_xor_sync(0xffffffffu, best_p, offset);
      const int other = __shfl_xor_sync(0xffffffffu, best, offset);
      if (route_before(other_p, other, best_p, best)) {
        best_p = other_p;
        best = other;
      }
    }
    if (best == INT_MAX) {  // NaN logits: any id in range
      best = (prev_id + 1) % e;
      best_p = -1.0f;
    }
    if (lane == j) {
      my_id = best;
      my_p = best_p;
    }
    kept += best_p;
    prev_p = best_p;
    prev_id = best;
  }
  const int width = k + rp.always_on;
  if (lane < k) {
    ids[t * width + lane] = my_id;
    weights[t * width + lane] = (rp.renormalize ? my_p / kept : my_p) * rp.scale;
    atomicAdd(counts + my_id, 1ull);
  } else if (lane < width) {  // the always-on experts
    ids[t * width + lane] = e + lane - k;
    weights[t * width + lane] = 1.0f;
  }
}

// ---- experts ----

// One warp: the R weight rows w[r] (K elements each; gate_up: the gate and the up row of one
// feature) times the x rows of pairs list[base, base + nb) (pair p reads x row
// p / tokens_per_pair), each weight vector loaded once for all nb pairs. acc[r][b]: the dot
// product of w[r] with pair list[base + b], summed over the warp (every lane holds it).
template <typename T, int V, int R>
__device__ __forceinline__ void dot_rows(const T* const (&w)[R], const T* x, int64_t x_stride,
                                         const int* list, int base, int nb, int64_t k_dim,
                                         int tokens_per_pair, float (&acc)[R][kTokensPerPass]) {
  const int lane = threadIdx.x & 31;
  const T* xr[kTokensPerPass];
#pragma unroll
  for (int b = 0; b < kTokensPerPass; ++b) {
    const int p = list[base + (b < nb ? b : 0)];
    xr[b] = x + int64_t{p / tokens_per_pair} * x_stride;
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r][b] = 0.0f;
  }
#pragma unroll 4
  for (int64_t c = int64_t{lane} * V; c < k_dim; c += 32 * V) {
    float wv[R][V];
#pragma unroll
    for (int r = 0; r < R; ++r) load_vec<T, V, true>(w[r] + c, wv[r]);
#pragma unroll
    for (int b = 0; b < kTokensPerPass; ++b) {
      if (b >= nb) break;
      float xv[V];
      load_vec<T, V, false>(xr[b] + c, xv);
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int i = 0; i < V; ++i) acc[r][b] += wv[r][i] * xv[i];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int b = 0; b < kTokensPerPass; ++b) acc[r][b] = warp_sum(acc[r][b]);
  }
}

// act (P, F) = silu(g) * u, [g | u] = x[token(p)] @ gate_up[e]^T, g and u rounded to T first (as
// the unfused matmul then silu_mul). Grid (F / kWarps, min(E, pairs)): a row per expert routed to.
template <typename T, int V>
__global__ void moe_gate_up_kernel(const T* x, int64_t d, const int32_t* ids, int pairs, int k,
                                   MoeExpertPtrs gate_up, int64_t f, T* act) {
  __shared__ moe::SlotPairs slot;
  pdl_wait();
  pdl_trigger();
  int e = -1;
  const int n_pairs = moe::slot_pairs(ids, pairs, slot, &e);
  const int* list = slot.list;
  const int64_t n = int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5);
  if (n_pairs == 0 || n >= f) return;
  const T* w = static_cast<const T*>(gate_up.ptr[e]);
  const T* rows[2] = {w + n * d, w + (f + n) * d};
  for (int base = 0; base < n_pairs; base += kTokensPerPass) {
    const int nb = min(kTokensPerPass, n_pairs - base);
    float acc[2][kTokensPerPass];
    dot_rows<T, V, 2>(rows, x, d, list, base, nb, d, k, acc);
    if ((threadIdx.x & 31) == 0) {
      for (int b = 0; b < nb; ++b) {
        const float g = to_f32(from_f32<T>(acc[0][b])), u = to_f32(from_f32<T>(acc[1][b]));
        act[int64_t{list[base + b]} * f + n] = from_f32<T>(silu(g) * u);
      }
    }
  }
}

// y (P, D) f32 = act[p] @ down[e]^T, rounded to T (the unfused matmul's output). Grid
// (D / kWarps, min(E, pairs)).
template <typename T, int V>
__global__ void moe_down_kernel(const T* act, int64_t f, const int32_t* ids, int pairs,
                                MoeExpertPtrs down, int64_t d, float* y) {
  __shared__ moe::SlotPairs slot;
  pdl_wait();
  pdl_trigger();
  int e = -1;
  const int n_pairs = moe::slot_pairs(ids, pairs, slot, &e);
  const int* list = slot.list;
  const int64_t n = int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5);
  if (n_pairs == 0 || n >= d) return;
  const T* rows[1] = {static_cast<const T*>(down.ptr[e]) + n * f};
  for (int base = 0; base < n_pairs; base += kTokensPerPass) {
    const int nb = min(kTokensPerPass, n_pairs - base);
    float acc[1][kTokensPerPass];
    dot_rows<T, V, 1>(rows, act, f, list, base, nb, f, 1, acc);
    if ((threadIdx.x & 31) == 0) {
      for (int b = 0; b < nb; ++b)
        y[int64_t{list[base + b]} * d + n] = to_f32(from_f32<T>(acc[0][b]));
    }
  }
}

// The widest routing row moe_combine_kernel keeps in registers (the top-k with any always-on
// experts: Mixtral 2, DeepSeek-V2 6 + 2); wider rows take the loop over memory.
constexpr int kCombineMaxK = 16;

// Each of the kCombineMaxK slots' place in ascending (id, slot) order (unused slots hold INT_MAX
// ids and so come last), found in registers.
__device__ __forceinline__ void slot_ranks(const int (&idv)[kCombineMaxK],
                                           int (&rank)[kCombineMaxK]) {
#pragma unroll
  for (int s = 0; s < kCombineMaxK; ++s) {
    int r = 0;
#pragma unroll
    for (int j = 0; j < kCombineMaxK; ++j)
      r += idv[j] < idv[s] || (idv[j] == idv[s] && j < s) ? 1 : 0;
    rank[s] = r;
  }
}

// out (Tc, D) = sum over the token's k slots in ascending (id, slot) order of weight * y, in fp32
// (fused multiply-adds), rounded once. One thread per element. Up to kCombineMaxK slots, every
// load is issued at once (the token's ids, weights and y rows) and the order is found in
// registers; the loop over memory it replaced waited on each slot's loads in turn (6.2 us at one
// token on the H200, bench/results/h200/mla/shared).
template <typename T>
__global__ void moe_combine_kernel(const float* y, const int32_t* ids, const float* weights,
                                   int64_t tokens, int k, int64_t d, T* out) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= tokens * d) return;
  const int64_t t = i / d, c = i % d;
  const int32_t* id = ids + t * k;
  const float* w = weights + t * k;
  const float* yt = y + t * k * d + c;  // slot s: yt[s * d]
  float acc = 0.0f;
  if (k <= kCombineMaxK) {
    int idv[kCombineMaxK];
    float yv[kCombineMaxK], wv[kCombineMaxK];
#pragma unroll
    for (int s = 0; s < kCombineMaxK; ++s) {
      idv[s] = s < k ? id[s] : INT_MAX;
      yv[s] = s < k ? yt[int64_t{s} * d] : 0.0f;
      wv[s] = s < k ? w[s] : 0.0f;
    }
    // Each slot's place in ascending (id, slot) order; then the sum in that order.
    int rank[kCombineMaxK];
    slot_ranks(idv, rank);
#pragma unroll
    for (int r = 0; r < kCombineMaxK; ++r) {
      if (r >= k) break;
      float py = 0.0f, pw = 0.0f;
#pragma unroll
      for (int s = 0; s < kCombineMaxK; ++s) {
        py = rank[s] == r ? yv[s] : py;
        pw = rank[s] == r ? wv[s] : pw;
      }
      acc = fmaf(py, pw, acc);
    }
  } else {
    int last = -1, last_slot = -1;
    for (int j = 0; j < k; ++j) {
      int pick = -1;  // the slot next after (last, last_slot) in (id, slot) order
      for (int s = 0; s < k; ++s) {
        const bool after = id[s] > last || (id[s] == last && s > last_slot);
        if (after && (pick < 0 || id[s] < id[pick])) pick = s;
      }
      last = id[pick];
      last_slot = pick;
      acc = fmaf(yt[int64_t{pick} * d], w[pick], acc);
    }
  }
  out[i] = from_f32<T>(acc);
}

// IB_MOE_ADD_NORM: moe_combine_kernel's sums, then add_rms_norm's register form
// (rms_norm_regs_kernel in norm.cu) on them, a block per token: the same arithmetic in the same
// order as the two kernels, so the residual and normed equal theirs bit for bit. A thread takes
// the row's 16-byte vectors threadIdx.x, + kThreads, ... (kPer of them), as the norm kernel does;
// the slots' ascending (id, slot) order is found once for the token.
constexpr int kAddNormThreads = 256;
template <typename T, int kPer>
__global__ void __launch_bounds__(kAddNormThreads)
    moe_combine_add_norm_kernel(const float* y, const int32_t* ids, const float* weights, int k,
                                int64_t d, T* residual, const T* gain, float eps, T* normed) {
  constexpr int kV = kVec16<T>;
  __shared__ float scratch[32];
  const auto column = [](int i) {
    return (int64_t{threadIdx.x} + int64_t{i} * kAddNormThreads) * kV;
  };
  float g[kPer][kV];
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    if (column(i) < d) load16_f32(gain + column(i), g[i]);
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const int32_t* id = ids + t * k;
  const float* w = weights + t * k;
  int idv[kCombineMaxK];
  float wv[kCombineMaxK];
#pragma unroll
  for (int s = 0; s < kCombineMaxK; ++s) {
    idv[s] = s < k ? id[s] : INT_MAX;
    wv[s] = s < k ? w[s] : 0.0f;
  }
  // The slot and weight of each rank in ascending (id, slot) order.
  int slot_of[kCombineMaxK];
  float weight_of[kCombineMaxK];
#pragma unroll
  for (int r = 0; r < kCombineMaxK; ++r) {
    slot_of[r] = 0;
    weight_of[r] = 0.0f;
  }
  int rank[kCombineMaxK];
  slot_ranks(idv, rank);
#pragma unroll
  for (int s = 0; s < kCombineMaxK; ++s) {
#pragma unroll
    for (int r = 0; r < kCombineMaxK; ++r) {
      slot_of[r] = rank[s] == r ? s : slot_of[r];
      weight_of[r] = rank[s] == r ? wv[s] : weight_of[r];
    }
  }
  const float* yt = y + t * k * d;  // slot s, column c: yt[s * d + c]
  T* rr = residual + t * d;
  float v[kPer][kV];
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    if (column(i) >= d) continue;
    float acc[kV] = {};
#pragma unroll
    for (int r = 0; r < kCombineMaxK; ++r) {
      if (r >= k) break;
      const float* ys = yt + int64_t{slot_of[r]} * d + column(i);
#pragma unroll
      for (int j = 0; j < kV; ++j) acc[j] = fmaf(ys[j], weight_of[r], acc[j]);
    }
    float res[kV];
    load16_f32(rr + column(i), res);
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const float o = to_f32(from_f32<T>(acc[j]));  // the combine's output, rounded to T
      v[i][j] = to_f32(from_f32<T>(res[j] + o));    // the residual add, rounded to T
      sum_sq += v[i][j] * v[i][j];
    }
    store16_f32(rr + column(i), v[i]);
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq, scratch) / static_cast<float>(d) + eps);
  T* outr = normed + t * d;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    if (column(i) >= d) continue;
#pragma unroll
    for (int j = 0; j < kV; ++j) v[i][j] = v[i][j] * inv_rms * g[i][j];
    store16_f32(outr + column(i), v[i]);
  }
}

int blocks_for(int64_t n, int per_block) {
  return static_cast<int>((n + per_block - 1) / per_block);
}

}  // namespace

void launch_moe_route(const Tensor& logits, const MoeRouteParams& routing, Tensor ids,
                      Tensor weights, Tensor counts, cudaStream_t stream, bool pdl) {
  const int64_t t = logits.rows();
  if (t == 0) return;
  const auto e = static_cast<int>(logits.row_size());
  const auto k = static_cast<int>(ids.row_size()) - routing.always_on;
  IB_ASSERT(k >= 1 && k <= kMoeMaxTopK && routing.always_on >= 0 && k + routing.always_on <= 32,
            "moe_route: top-k above kMoeMaxTopK, or more than 32 columns");
  IB_ASSERT(routing.num_groups <= kMoeMaxGroups, "moe_route: more groups than kMoeMaxGroups");
  launch_kernel("moe_route", pdl, moe_route_kernel, dim3(blocks_for(t, kRouteWarps)),
                dim3(kRouteWarps * 32), 0, stream, logits.as<const float>(), t, e, k, routing,
                ids.as<int32_t>(), weights.as<float>(), counts.as<unsigned long long>());
}

int64_t moe_chunk_tokens(int64_t tokens, int64_t k, int64_t d, int64_t f, DType dtype,
                         size_t workspace_bytes) {
  // Per pair: its act row (F of the dtype) and its y row (D f32); 256 bytes for the alignment.
  const auto per_pair = static_cast<int64_t>(dtype_size(dtype)) * f + 4 * d;
  const int64_t by_bytes = (static_cast<int64_t>(workspace_bytes) - 256) / (k * per_pair);
  return std::max<int64_t>(0, std::min({tokens, kMaxChunkPairs / k, by_bytes}));
}

bool launch_moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                        const MoeExpertPtrs& gate_up, const MoeExpertPtrs& down, int num_experts,
                        int64_t f, void* workspace, size_t workspace_bytes,
                        const MoeKernelChoice& choice, Tensor out, cudaStream_t stream,
                        const MoeAddNorm* add_norm, const MoeInt4Experts* int4) {
  const int64_t t = x.rows(), d = x.row_size(), k = ids.row_size();
  if (t == 0) return false;
  bool aligned = aligned16(x.data);
  for (int i = 0; i < num_experts; ++i)
    aligned = aligned && aligned16(gate_up.ptr[i]) && aligned16(down.ptr[i]);
  // The grouped GEMM (IB_MOE_GEMM) for calls of at least gemm_min_tokens (dense experts: past
  // the tile forms' sizes too), where it takes the shapes and its scratch holds a token.
  const bool gemm_shapes =
      choice.gemm_min_tokens > 0 && t >= choice.gemm_min_tokens &&
      (int4 != nullptr || (t > choice.wide_max_tokens && t > choice.tile_max_tokens &&
                           t > choice.balance_max_tokens && t > choice.warp_max_tokens)) &&
      aligned && moe_gemm_takes(x.dtype, d, f, num_experts, int4);
  const int64_t gemm_chunk =
      gemm_shapes ? moe_gemm_chunk_tokens(t, k, num_experts, d, f, x.dtype, workspace_bytes) : 0;
  const bool gemm = gemm_chunk >= 1;
  const int64_t chunk = gemm ? gemm_chunk : moe_chunk_tokens(t, k, d, f, x.dtype, workspace_bytes);
  IB_ASSERT(chunk >= 1, "moe_experts: the workspace holds no token's expert activations");
  // Workspace: act (chunk * k, F) of T, then y (chunk * k, D) f32, 256-byte aligned; the grouped
  // GEMM's own layout (moe_gemm_layout) when it runs.
  const MoeGemmLayout layout = moe_gemm_layout(chunk * k, num_experts, d, f, x.dtype);
  const size_t act_bytes =
      (static_cast<size_t>(chunk * k * f) * dtype_size(x.dtype) + 255) / 256 * 256;
  auto* y = reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                     (gemm ? layout.y_offset : act_bytes));
  IB_DISPATCH_FLOAT(x.dtype, T, {
    constexpr int kV = kVec16<T>;
    const bool vec = d % kV == 0 && f % kV == 0 && aligned;
    auto* gate_kernel = vec ? moe_gate_up_kernel<T, kV> : moe_gate_up_kernel<T, 1>;
    auto* down_kernel = vec ? moe_down_kernel<T, kV> : moe_down_kernel<T, 1>;
    T* act = static_cast<T*>(workspace);
    for (int64_t t0 = 0; t0 < t; t0 += chunk) {
      const int64_t tc = std::min(chunk, t - t0);
      const auto pairs = static_cast<int>(tc * k);
      const T* xc = x.as<const T>() + t0 * d;
      const int32_t* idc = ids.as<const int32_t>() + t0 * k;
      const auto slots = static_cast<unsigned>(std::min(num_experts, pairs));
      const bool wide = tc <= choice.wide_max_tokens, tiles = tc <= choice.tile_max_tokens;
      const bool warps = !wide && tc <= choice.warp_max_tokens;
      if (gemm) {
        launch_moe_gemm(xc, idc, pairs, static_cast<int>(k), gate_up, down, num_experts, d, f,
                        x.dtype, layout, workspace, stream, choice.pdl, int4);
      } else if (int4 != nullptr) {
        launch_moe_int4(xc, idc, pairs, static_cast<int>(k), *int4, d, f, slots, choice.num_sms,
                        x.dtype, act, y, stream, choice.pdl, choice.int4_ring);
      } else if (warps) {
        launch_moe_warps(xc, idc, pairs, static_cast<int>(k), gate_up, down, vec, d, f, slots,
                         choice.num_sms, choice.warp_ring, x.dtype, act, y, stream, choice.pdl);
      } else if (wide || tiles || tc <= choice.balance_max_tokens) {
        const MoeTileForm form = wide    ? MoeTileForm::kWide
                                 : tiles ? MoeTileForm::kTiles
                                         : MoeTileForm::kBalanced;
        launch_moe_tiles(xc, idc, pairs, static_cast<int>(k), gate_up, down, vec, d, f, slots,
                         choice.num_sms, form, x.dtype, act, y, stream, choice.pdl);
      } else {
        const dim3 gate_grid(static_cast<unsigned>(blocks_for(f, kWarps)), slots);
        const dim3 down_grid(static_cast<unsigned>(blocks_for(d, kWarps)), slots);
        launch_kernel("moe_experts", choice.pdl, gate_kernel, gate_grid, dim3(kThreads), 0, stream,
                      xc, d, idc, pairs, static_cast<int>(k), gate_up, f, act);
        launch_kernel("moe_experts", choice.pdl, down_kernel, down_grid, dim3(kThreads), 0, stream,
                      static_cast<const T*>(act), f, idc, pairs, down, d, y);
      }
      const float* wc = weights.as<const float>() + t0 * k;
      if (add_norm == nullptr) {
        launch_kernel("moe_experts combine", choice.pdl, moe_combine_kernel<T>,
                      dim3(blocks_for(tc * d, kThreads)), dim3(kThreads), 0, stream,
                      static_cast<const float*>(y), idc, wc, tc, static_cast<int>(k), d,
                      out.as<T>() + t0 * d);
        continue;
      }
      Tensor residual = add_norm->residual.slice_rows(t0, tc);
      Tensor normed = add_norm->normed.slice_rows(t0, tc);
      const int64_t per = (d + int64_t{kAddNormThreads} * kV - 1) / (int64_t{kAddNormThreads} * kV);
      if (k <= kCombineMaxK && d % kV == 0 && per <= 4 && aligned16(residual.data) &&
          aligned16(normed.data) && aligned16(add_norm->gain.data)) {
        auto* kernel = per == 1   ? moe_combine_add_norm_kernel<T, 1>
                       : per == 2 ? moe_combine_add_norm_kernel<T, 2>
                                  : moe_combine_add_norm_kernel<T, 4>;
        launch_kernel("moe_experts combine + add_rms_norm", choice.pdl, kernel,
                      dim3(static_cast<unsigned>(tc)), dim3(kAddNormThreads), 0, stream,
                      static_cast<const float*>(y), idc, wc, static_cast<int>(k), d,
                      residual.as<T>(), add_norm->gain.as<const T>(), add_norm->eps,
                      normed.as<T>());
      } else {  // the combine into normed, then add_rms_norm in place
        launch_kernel("moe_experts combine", choice.pdl, moe_combine_kernel<T>,
                      dim3(blocks_for(tc * d, kThreads)), dim3(kThreads), 0, stream,
                      static_cast<const float*>(y), idc, wc, tc, static_cast<int>(k), d,
                      normed.as<T>());
        launch_rms_norm(&residual, normed, add_norm->gain, add_norm->eps, normed, stream,
                        choice.pdl);
      }
    }
  });
  return gemm;
}

}  // namespace ib::cuda
