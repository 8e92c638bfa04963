// The experts' matmuls of large chunks (prefill, large decode batches) as a grouped tensor-core
// GEMM (IB_MOE_GEMM). moe.cu's warp-per-row kernels walk every pair routed to an expert with CUDA
// cores, so a prefill of 256 tokens through Mixtral-8x7B spent ~0.5 s in them; here each expert's
// pairs form row tiles of a GEMM against its weights, with m16n8k16 MMAs.
//
// No host round trip, so it runs inside CUDA graphs too: a one-block plan kernel sorts the chunk's
// pairs by expert (in pair order within an expert) into row tiles of kBM (the last tile of each
// expert padded with -1), and writes each tile's expert and the number of tiles; the GEMM grids
// are sized on the host for the most tiles the chunk can need, and blocks past the plan's count
// exit at once.
//
// gate_up: a block computes kBN / 2 features of a row tile (their gate rows and their up rows as
// the B tile's two halves) and writes act = silu(g) * u with g and u rounded to T first (as the
// unfused matmul then silu_mul, and as the other forms do), act rows in the plan's sorted order.
// down: a block computes kBN outputs of a row tile from those act rows and writes them, rounded to
// T, to y (pairs, D) f32 at each row's pair, where the combine kernels read them.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/gemm_tile.cuh"
#include "backend/cuda/detail/moe_device.cuh"
#include "backend/cuda/detail/moe_kernels.h"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace {

using namespace gemm_tile;        // the tile's sizes (kBM, kBN, kBK, kStages, ...)
constexpr int kCPitch = kBN + 4;  // the gate_up epilogue's f32 rows
static_assert(kBM * kCPitch * 4 <= kSmemBytes, "the epilogue's tile fits the pipeline's memory");
constexpr int kPlanThreads = 1024;

size_t align256(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

// The plan of one chunk (one block): sorted (max_tiles * kBM) the pair of each tile row (-1:
// padding), tile_expert (max_tiles) each tile's expert, *num_tiles the tiles used.
__global__ void __launch_bounds__(kPlanThreads)
    moe_gemm_plan_kernel(const int32_t* ids, int pairs, int num_experts, int32_t* sorted,
                         int32_t* tile_expert, int32_t* num_tiles) {
  __shared__ int32_t ids_s[moe::kMaxChunkPairs];
  __shared__ int count_s[kMoeMaxExperts];
  __shared__ int offset_s[kMoeMaxExperts];
  pdl_wait();  // IB_MOE_PDL: every MoE kernel waits first, then lets the next one launch
  pdl_trigger();
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) ids_s[p] = ids[p];
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  // A warp per expert counts its pairs, 32 at a time.
  for (int e = warp; e < num_experts; e += warps) {
    int c = 0;
    for (int p0 = 0; p0 < pairs; p0 += 32) {
      const int p = p0 + lane;
      c += __popc(__ballot_sync(0xffffffffu, p < pairs && ids_s[p] == e));
    }
    if (lane == 0) count_s[e] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int rows = 0, tiles = 0;
    for (int e = 0; e < num_experts; ++e) {
      offset_s[e] = rows;
      const int t = (count_s[e] + kBM - 1) / kBM;
      for (int i = 0; i < t; ++i) tile_expert[tiles + i] = e;
      tiles += t;
      rows += t * kBM;
    }
    *num_tiles = tiles;
  }
  __syncthreads();
  // The same warps place their experts' pairs in pair order, then pad the last tile.
  for (int e = warp; e < num_experts; e += warps) {
    int pos = offset_s[e];
    for (int p0 = 0; p0 < pairs; p0 += 32) {
      const int p = p0 + lane;
      const bool mine = p < pairs && ids_s[p] == e;
      const unsigned m = __ballot_sync(0xffffffffu, mine);
      if (mine) sorted[pos + __popc(m & ((1u << lane) - 1u))] = p;
      pos += __popc(m);
    }
    const int end = offset_s[e] + (count_s[e] + kBM - 1) / kBM * kBM;
    for (int i = pos + lane; i < end; i += 32) sorted[i] = -1;
  }
}

// One GEMM's operands. gate_up: a = x (row of pair p: p / k, stride K = D), n = F, out act; down:
// a = act (sorted rows, stride K = F), n = D, out y.
template <typename T>
struct GemmArgs {
  const T* a;
  int k_per_pair;  // gate_up: top-k (x row = pair / k); down: 0 (a's rows are the sorted rows)
  int64_t k_dim;
  int64_t n;
  const int32_t* sorted;
  const int32_t* tile_expert;
  const int32_t* num_tiles;
  T* act;
  float* y;
};

// kInt4: the experts are 4-bit (backend/weight.h kInt4W4A16: codes (N, K / 2), f16 scales and u8
// zero points per group of a multiple of 128): each stage's codes arrive by cp.async and the
// block turns them into T, (q - z) * s rounded once, in a B tile of its own before the MMAs.
template <bool kInt4>
using GemmWeights = std::conditional_t<kInt4, MoeInt4Ptrs, MoeExpertPtrs>;

template <typename T, bool kGateUp, bool kInt4>
__global__ void __launch_bounds__(kThreads, 2)
    moe_gemm_kernel(GemmArgs<T> g, GemmWeights<kInt4> weights) {
  __shared__ __align__(16) unsigned char smem[kSmemBytes];
  T* as = reinterpret_cast<T*>(smem);
  T* bs = as + kStages * kAStage;  // kInt4: one B tile, then the stages' codes
  uint8_t* codes_s = smem + kCodesOffsetBytes;
  pdl_wait();
  pdl_trigger();
  const int tile = static_cast<int>(blockIdx.x);
  if (tile >= *g.num_tiles) return;
  const int expert = g.tile_expert[tile];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t k_dim = g.k_dim, n_out = g.n;
  const int64_t n0 = int64_t{blockIdx.y} * (kGateUp ? kBN / 2 : kBN);
  const int32_t* sorted = g.sorted + int64_t{tile} * kBM;
  // The weight row of B tile row r (gate_up: rows 0-63 the features' gate rows, 64-127 their up
  // rows), and whether it exists.
  const auto weight_row = [&](int r, bool& ok) -> int64_t {
    if constexpr (kGateUp) {
      const int64_t feature = n0 + (r & 63);
      ok = feature < n_out;
      return ok ? (r < 64 ? feature : n_out + feature) : 0;
    } else {
      ok = n0 + r < n_out;
      return ok ? n0 + r : 0;
    }
  };

  // Loads: A 64 rows x 4 16-byte chunks (one a thread); dense B 128 rows x 4 (two a thread);
  // 4-bit B 128 rows of 16 bytes of codes (threads 0-127).
  const int a_row = tid >> 2;
  const int32_t a_pair = sorted[a_row];
  const bool a_ok = a_pair >= 0;
  const T* a_src;
  if constexpr (kGateUp) {
    a_src = g.a + (a_ok ? int64_t{a_pair / g.k_per_pair} * k_dim : 0);
  } else {
    a_src = g.a + (int64_t{tile} * kBM + a_row) * k_dim;
  }
  const T* b_src[2] = {};
  bool b_ok[2] = {};
  const uint8_t* q_src = nullptr;
  bool q_ok = false;
  // 4-bit conversion: thread tid turns half a row (16 codes) of B tile row tid / 2 into T.
  const int c_row = tid >> 1, c_half = tid & 1;
  bool c_ok = false;
  const __half* c_scales = nullptr;
  const uint8_t* c_zeros = nullptr;
  int64_t groups = 1, group_size = k_dim;
  if constexpr (kInt4) {
    q_src = static_cast<const uint8_t*>(weights.codes[expert]) +
            weight_row(tid & (kBN - 1), q_ok) * (k_dim / 2);
    group_size = weights.group_size;
    groups = k_dim / group_size;
    const int64_t row = weight_row(c_row, c_ok);
    c_scales = static_cast<const __half*>(weights.scales[expert]) + row * groups;
    c_zeros = static_cast<const uint8_t*>(weights.zeros[expert]) + row * groups;
  } else {
    const T* w = static_cast<const T*>(weights.ptr[expert]);
#pragma unroll
    for (int i = 0; i < 2; ++i) b_src[i] = w + weight_row(a_row + 64 * i, b_ok[i]) * k_dim;
  }
  const auto load_stage = [&](int stage, int kt) {
    gemm_tile::load_rows_chunk(as + stage * kAStage, a_src, a_ok, kt, k_dim);
    if constexpr (kInt4) {
      // K is a multiple of 128: every stage is whole.
      if (tid < kBN)
        cp_async16(codes_s + (stage * kBN + tid) * (kBK / 2), q_src + int64_t{kt} * (kBK / 2),
                   q_ok);
    } else {
#pragma unroll
      for (int i = 0; i < 2; ++i)
        gemm_tile::load_rows_chunk(bs + stage * kBStage + 64 * i * kPitch, b_src[i], b_ok[i], kt,
                                   k_dim);
    }
  };
  const auto load_group = [&](int64_t group, float& scale, float& zero) {
    if (!c_ok) return;
    scale = __half2float(c_scales[group]);
    zero = static_cast<float>(c_zeros[group]);
  };
  const int kt_count = static_cast<int>((k_dim + kBK - 1) / kBK);
  gemm_tile::StageGroups params{static_cast<int>(group_size / kBK)};
  if constexpr (kInt4) params.start(0, load_group);
  // The 4-bit stage's codes into the B tile: (q - z) * s, code 2j in the low nibble of byte j.
  const auto convert_stage = [&](int stage, int kt) {
    params.advance(kt, kt_count, load_group);
    const uint2 q =
        *reinterpret_cast<const uint2*>(codes_s + (stage * kBN + c_row) * (kBK / 2) + c_half * 8);
    uint32_t v[8];
    gemm_tile::convert_int4<T>(q, params.scale, params.zero, c_ok, v);
    gemm_tile::store_b16(bs, v);
  };
  gemm_tile::Acc acc;
  gemm_tile::mainloop<T, kInt4>(0, kt_count, as, bs, load_stage, convert_stage, acc);

  if constexpr (kGateUp) {
    // Gate and up of a feature sit in different warps: meet in shared memory.
    __syncthreads();  // every warp is done with the pipeline's memory
    float* cs = reinterpret_cast<float*>(smem);
    gemm_tile::for_each_pair(acc, [&](int r, int c, float v0, float v1) {
      cs[r * kCPitch + c] = v0;
      cs[r * kCPitch + c + 1] = v1;
    });
    __syncthreads();
    for (int i = tid; i < kBM * (kBN / 2); i += kThreads) {
      const int r = i / (kBN / 2), c = i % (kBN / 2);
      const int64_t feature = n0 + c;
      if (feature >= n_out || sorted[r] < 0) continue;
      const float gv = to_f32(from_f32<T>(cs[r * kCPitch + c]));
      const float uv = to_f32(from_f32<T>(cs[r * kCPitch + kBN / 2 + c]));
      g.act[(int64_t{tile} * kBM + r) * n_out + feature] = from_f32<T>(silu(gv) * uv);
    }
  } else {
    gemm_tile::for_each_pair(acc, [&](int r, int c, float v0, float v1) {
      const int32_t pair = sorted[r];
      const int64_t col = n0 + c;
      if (pair < 0 || col >= n_out) return;  // D is even: col + 1 is in too
      float* out = g.y + int64_t{pair} * n_out;
      out[col] = to_f32(from_f32<T>(v0));
      out[col + 1] = to_f32(from_f32<T>(v1));
    });
  }
}

template <typename T, bool kInt4>
void launch_gemm(const T* x, const int32_t* ids, int pairs, int k,
                 const GemmWeights<kInt4>& gate_up, const GemmWeights<kInt4>& down, int num_experts,
                 int64_t d, int64_t f, const MoeGemmLayout& layout, void* workspace,
                 cudaStream_t stream, bool pdl) {
  auto* base = static_cast<char*>(workspace);
  auto* sorted = reinterpret_cast<int32_t*>(base + layout.sorted_offset);
  auto* tile_expert = reinterpret_cast<int32_t*>(base + layout.tiles_offset);
  auto* num_tiles = reinterpret_cast<int32_t*>(base + layout.count_offset);
  T* act = reinterpret_cast<T*>(base + layout.act_offset);
  auto* y = reinterpret_cast<float*>(base + layout.y_offset);
  launch_kernel("moe_experts gemm plan", pdl, moe_gemm_plan_kernel, dim3(1), dim3(kPlanThreads), 0,
                stream, ids, pairs, num_experts, sorted, tile_expert, num_tiles);
  const auto tiles = static_cast<unsigned>(layout.max_tiles);
  GemmArgs<T> gu{x, k, d, f, sorted, tile_expert, num_tiles, act, nullptr};
  launch_kernel("moe_experts gemm gate_up", pdl, moe_gemm_kernel<T, true, kInt4>,
                dim3(tiles, static_cast<unsigned>((f + kBN / 2 - 1) / (kBN / 2))), dim3(kThreads),
                0, stream, gu, gate_up);
  GemmArgs<T> dn{act, 0, f, d, sorted, tile_expert, num_tiles, nullptr, y};
  launch_kernel("moe_experts gemm down", pdl, moe_gemm_kernel<T, false, kInt4>,
                dim3(tiles, static_cast<unsigned>((d + kBN - 1) / kBN)), dim3(kThreads), 0, stream,
                dn, down);
}

template <bool kInt4>
void launch_dtype(const void* x, const int32_t* ids, int pairs, int k,
                  const GemmWeights<kInt4>& gate_up, const GemmWeights<kInt4>& down,
                  int num_experts, int64_t d, int64_t f, DType dtype, const MoeGemmLayout& layout,
                  void* workspace, cudaStream_t stream, bool pdl) {
  if (dtype == DType::kBF16) {
    launch_gemm<bf16, kInt4>(static_cast<const bf16*>(x), ids, pairs, k, gate_up, down, num_experts,
                             d, f, layout, workspace, stream, pdl);
  } else {
    launch_gemm<f16, kInt4>(static_cast<const f16*>(x), ids, pairs, k, gate_up, down, num_experts,
                            d, f, layout, workspace, stream, pdl);
  }
}

}  // namespace

bool moe_gemm_takes(DType dtype, int64_t d, int64_t f, int num_experts,
                    const MoeInt4Experts* int4) {
  const bool shapes = (dtype == DType::kBF16 || dtype == DType::kF16) && d > 0 && f > 0 &&
                      d % 8 == 0 && f % 8 == 0 && num_experts >= 1 && num_experts <= kMoeMaxExperts;
  if (int4 == nullptr || !shapes) return shapes;
  // A stage's 32 codes of a row lie in one group; each row's codes are 16-byte aligned.
  const int gu = int4->gate_up.group_size, dn = int4->down.group_size;
  if (!moe_int4_takes(d, gu) || !moe_int4_takes(f, dn) || gu <= 0 || dn <= 0) return false;
  for (int i = 0; i < num_experts; ++i) {
    if (!aligned16(int4->gate_up.codes[i]) || !aligned16(int4->down.codes[i])) return false;
  }
  return true;
}

MoeGemmLayout moe_gemm_layout(int64_t pairs, int num_experts, int64_t d, int64_t f, DType dtype) {
  MoeGemmLayout l;
  l.max_tiles = (pairs + kBM - 1) / kBM + std::min<int64_t>(num_experts, pairs);
  const int64_t rows = l.max_tiles * kBM;
  l.act_offset = 0;
  l.y_offset = align256(static_cast<size_t>(rows * f) * dtype_size(dtype));
  l.sorted_offset = l.y_offset + align256(static_cast<size_t>(pairs * d) * sizeof(float));
  l.tiles_offset = l.sorted_offset + align256(static_cast<size_t>(rows) * sizeof(int32_t));
  l.count_offset = l.tiles_offset + align256(static_cast<size_t>(l.max_tiles) * sizeof(int32_t));
  l.bytes = l.count_offset + 256;
  return l;
}

int64_t moe_gemm_chunk_tokens(int64_t tokens, int64_t k, int num_experts, int64_t d, int64_t f,
                              DType dtype, size_t workspace_bytes) {
  // The layout grows with the chunk: the largest chunk that fits, by bisection.
  int64_t lo = 0, hi = std::min(tokens, moe::kMaxChunkPairs / k);
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (moe_gemm_layout(mid * k, num_experts, d, f, dtype).bytes <= workspace_bytes) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

void launch_moe_gemm(const void* x, const int32_t* ids, int pairs, int k,
                     const MoeExpertPtrs& gate_up, const MoeExpertPtrs& down, int num_experts,
                     int64_t d, int64_t f, DType dtype, const MoeGemmLayout& layout,
                     void* workspace, cudaStream_t stream, bool pdl, const MoeInt4Experts* int4) {
  IB_ASSERT(moe_gemm_takes(dtype, d, f, num_experts, int4) && pairs >= 1 &&
                pairs <= moe::kMaxChunkPairs && k >= 1,
            "moe_experts gemm: bf16 / fp16, D and F multiples of 8 (4-bit: of 128, with their "
            "groups), 1-2,048 pairs");
  if (int4 != nullptr) {
    launch_dtype<true>(x, ids, pairs, k, int4->gate_up, int4->down, num_experts, d, f, dtype,
                       layout, workspace, stream, pdl);
  } else {
    launch_dtype<false>(x, ids, pairs, k, gate_up, down, num_experts, d, f, dtype, layout,
                        workspace, stream, pdl);
  }
}

}  // namespace ib::cuda
