// The weight-only quantized formats' matmuls past the decode GEMV's tokens (IB_QUANT_GEMM) as one
// tensor-core GEMM: each stage's codes (W4A16 as AWQ / GPTQ, NF4, INT8 W8A16) arrive by cp.async
// and the block turns them into the activation dtype in shared memory (detail/gemm_tile.cuh),
// instead of dequantizing the whole weight into a bf16 scratch for cuBLASLt on every call (2.5
// bytes of traffic a weight before the GEMM reads 2 more: Qwen2-72B AWQ's 214 ms TTFT).
//
// Tiles of 64 x 128 outputs, the conversion a stage ahead of the MMAs (gemm_tile.cuh's
// mainloop_convert_ahead); where they do not fill the device twice over (decode batches, small
// N) K is split across blocks, each writing its fp32 partial sums, and a second kernel adds them in
// split order (deterministic) and finishes the outputs. Act-order (GPTQ desc_act) weights take x
// with its columns permuted into the scratch first. No host round trip: graph-safe.
#include <algorithm>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/gemm_tile.cuh"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/nf4_levels.cuh"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace {

using namespace gemm_tile;  // the tile's sizes (kBM, kBN, kBK, kStages, ...)
constexpr int kMaxSplits = 16;
constexpr int kMinStagesPerSplit = 8;  // 256 k: a split's pipeline still fills
constexpr int kElementwiseThreads = 256;

enum class Codes { kInt4, kNf4, kInt8 };

struct QuantGemmArgs {
  const void* x;  // (M, K) T
  int64_t m, n, k;
  const uint8_t* codes;  // (N, K / 2) 4-bit, (N, K) int8
  const void* scales;    // kInt4 (N, K / group) f16, kNf4 the same f32, kInt8 (N) f32
  const uint8_t* zeros;  // kInt4 (N, K / group) u8
  int64_t group_size;
  const void* bias;  // (N) T, or null
  void* out;         // (M, N) T
  bool accumulate;   // out += rather than out =
  float* partials;   // split K: (splits, M, N) f32
  int kt_per_split;
};

// out[row][col] from its sum v: times the row's scale (int8: the accumulator summed the integer
// codes), plus the bias and, accumulating, the old value, in fp32, rounded to T once (cuBLASLt's
// epilogue with beta = 1 does the same).
template <typename T, bool kScaled>
__device__ __forceinline__ void finish(const QuantGemmArgs& g, int64_t row, int64_t col, float v) {
  if constexpr (kScaled) v *= static_cast<const float*>(g.scales)[col];
  if (g.bias != nullptr) v += to_f32(static_cast<const T*>(g.bias)[col]);
  T* out = static_cast<T*>(g.out) + row * g.n + col;
  if (g.accumulate) v += to_f32(*out);
  *out = from_f32<T>(v);
}

template <typename T, Codes kCodes>
__global__ void __launch_bounds__(kThreads, 2) quant_gemm_kernel(QuantGemmArgs g) {
  extern __shared__ __align__(16) unsigned char smem[];  // kAheadSmemBytes
  __shared__ float levels_s[16];
  T* as = reinterpret_cast<T*>(smem);
  T* bs = reinterpret_cast<T*>(smem + kAheadBOffsetBytes);  // the two converted B tiles
  uint8_t* codes_s = smem + kAheadCodesOffsetBytes;
  constexpr bool kInt8 = kCodes == Codes::kInt8;
  constexpr int kStageRowBytes = kInt8 ? kBK : kBK / 2;  // a weight row's codes in a stage
  const int tid = static_cast<int>(threadIdx.x);
  if constexpr (kCodes == Codes::kNf4) {
    if (tid < 16) levels_s[tid] = kNf4LevelsDevice[tid];  // read after the K loop's barrier
  }
  const int64_t m0 = int64_t{blockIdx.x} * kBM, n0 = int64_t{blockIdx.y} * kBN;
  const int64_t k_dim = g.k;
  const int kt_count = static_cast<int>((k_dim + kBK - 1) / kBK);
  const int kt_begin = static_cast<int>(blockIdx.z) * g.kt_per_split;
  const int kt_end = min(kt_count, kt_begin + g.kt_per_split);

  // A: 64 rows x 4 16-byte chunks, one a thread.
  const int a_row = tid >> 2;
  const bool a_ok = m0 + a_row < g.m;
  const T* a_src = static_cast<const T*>(g.x) + (a_ok ? (m0 + a_row) * k_dim : 0);
  // B's codes: 4-bit 128 rows of 16 bytes (threads 0-127), int8 128 rows of 2 x 16 bytes.
  const int64_t code_row_bytes = kInt8 ? k_dim : k_dim / 2;
  const int l_row = kInt8 ? tid >> 1 : tid & (kBN - 1), l_part = kInt8 ? tid & 1 : 0;
  const bool l_ok = n0 + l_row < g.n && (kInt8 || tid < kBN);
  const uint8_t* l_src = g.codes + (l_ok ? (n0 + l_row) * code_row_bytes : 0) + l_part * 16;
  const auto load_stage = [&](int slot, int kt) {
    gemm_tile::load_rows_chunk(as + slot * kAStage, a_src, a_ok, kt, k_dim);
    if constexpr (kInt8) {
      const bool in = int64_t{kt} * kBK + l_part * 16 < k_dim;  // K is a multiple of 16
      cp_async16(codes_s + (slot * kBN + l_row) * kStageRowBytes + l_part * 16,
                 l_src + (in ? int64_t{kt} * kBK : 0), l_ok && in);
    } else if (tid < kBN) {  // K is a multiple of the group, itself of 32: stages are whole
      cp_async16(codes_s + (slot * kBN + l_row) * kStageRowBytes, l_src + int64_t{kt} * (kBK / 2),
                 l_ok);
    }
  };

  // Conversion: thread tid turns 16 k (half tid % 2 of the stage) of B tile row tid / 2 into T.
  const int c_row = tid >> 1, c_half = tid & 1;
  const bool c_ok = n0 + c_row < g.n;
  const int64_t groups = kInt8 ? 1 : k_dim / g.group_size;
  const int64_t c_group0 = (c_ok ? n0 + c_row : 0) * groups;
  const auto load_group = [&](int64_t group, float& scale, float& zero) {
    if (!c_ok) return;
    if constexpr (kCodes == Codes::kInt4) {
      scale = __half2float(static_cast<const __half*>(g.scales)[c_group0 + group]);
      zero = static_cast<float>(g.zeros[c_group0 + group]);
    } else if constexpr (kCodes == Codes::kNf4) {
      scale = static_cast<const float*>(g.scales)[c_group0 + group];  // the absmax
    }
  };
  gemm_tile::StageGroups params{kInt8 ? 1 : static_cast<int>(g.group_size / kBK)};
  if constexpr (!kInt8) params.start(kt_begin, load_group);
  const auto convert_stage = [&](int slot, int kt, T* tile) {
    const uint8_t* row_codes = codes_s + (slot * kBN + c_row) * kStageRowBytes;
    uint32_t v[8];
    if constexpr (kInt8) {  // zero-filled past N and K
      gemm_tile::convert_int8<T>(*reinterpret_cast<const uint4*>(row_codes + c_half * 16), v);
    } else {
      params.advance(kt, kt_end, load_group);  // the stage lies in one group
      const uint2 q8 = *reinterpret_cast<const uint2*>(row_codes + c_half * 8);
      if constexpr (kCodes == Codes::kInt4) {
        gemm_tile::convert_int4<T>(q8, params.scale, params.zero, c_ok, v);
      } else {
        gemm_tile::convert_nf4<T>(q8, levels_s, params.scale, c_ok, v);
      }
    }
    gemm_tile::store_b16(tile, v);
  };
  gemm_tile::Acc acc;
  gemm_tile::mainloop_convert_ahead<T>(kt_begin, kt_end, as, bs, load_stage, convert_stage, acc);

  const bool split = gridDim.z > 1;
  gemm_tile::for_each_pair(acc, [&](int r, int c, float v0, float v1) {
    const int64_t row = m0 + r, col = n0 + c;
    if (row >= g.m || col >= g.n) return;
    const bool second = col + 1 < g.n;
    if (split) {
      float* p = g.partials + (int64_t{blockIdx.z} * g.m + row) * g.n + col;
      p[0] = v0;
      if (second) p[1] = v1;
      return;
    }
    finish<T, kInt8>(g, row, col, v0);
    if (second) finish<T, kInt8>(g, row, col + 1, v1);
  });
}

// Split K: each output is the sum of its splits' partials, in split order.
template <typename T, bool kScaled>
__global__ void quant_gemm_finish_kernel(QuantGemmArgs g, int splits) {
  const int64_t total = g.m * g.n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) v += g.partials[s * total + i];
    finish<T, kScaled>(g, i / g.n, i % g.n, v);
  }
}

// xp (rows, K) = x's columns in the stored weight's order: xp[r][c] = x[r][perm[c]].
template <typename T>
__global__ void permute_columns_kernel(const T* __restrict__ x, const int32_t* __restrict__ perm,
                                       T* __restrict__ xp, int64_t rows, int64_t k) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * k;
       i += int64_t{gridDim.x} * blockDim.x) {
    xp[i] = x[(i / k) * k + perm[i % k]];
  }
}

unsigned elementwise_grid(int64_t n) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((n + kElementwiseThreads - 1) / kElementwiseThreads, 1, 1 << 20));
}

// K splits for a chunk of rows: one where the tiles fill the device twice over (two blocks an
// SM), else enough to, each split at least kMinStagesPerSplit stages, their partials in the
// scratch.
int splits_for(int64_t rows, int64_t n, int64_t k, size_t partial_bytes, int num_sms) {
  const int64_t blocks = ((rows + kBM - 1) / kBM) * ((n + kBN - 1) / kBN);
  const int64_t target = 2 * int64_t{num_sms};
  if (blocks >= target) return 1;
  const int64_t kt_count = (k + kBK - 1) / kBK;
  const int64_t by_memory = static_cast<int64_t>(partial_bytes) / (rows * n * 4);
  const int64_t splits = std::min({(target + blocks - 1) / blocks, kt_count / kMinStagesPerSplit,
                                   by_memory, int64_t{kMaxSplits}});
  return static_cast<int>(std::max<int64_t>(1, splits));
}

// Past the 48 KB of shared memory a kernel gets unasked: the allowance is the current device's,
// so prepare_quant_gemm sets it on each backend's device (every rank's, with tensor parallelism).
template <typename T, Codes kCodes>
cudaError_t allow_shared_memory() {
  return cudaFuncSetAttribute(quant_gemm_kernel<T, kCodes>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize, kAheadSmemBytes);
}

template <typename T, Codes kCodes>
void launch_typed(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out,
                  bool accumulate, void* scratch, size_t scratch_bytes, int num_sms,
                  cudaStream_t stream) {
  const int64_t m = x.rows(), n = w.rows(), k = w.cols();
  const bool permuted = !w.input_perm.empty();
  // Act-order: the first half of the scratch holds a chunk of permuted rows, the rest partials.
  const size_t perm_bytes = permuted ? scratch_bytes / 2 / 256 * 256 : 0;
  auto* partials = reinterpret_cast<float*>(static_cast<char*>(scratch) + perm_bytes);
  const size_t partial_bytes = scratch_bytes - perm_bytes;
  const int64_t row_bytes = k * static_cast<int64_t>(sizeof(T));
  const int64_t chunk = permuted ? static_cast<int64_t>(perm_bytes) / row_bytes : m;
  IB_ASSERT(chunk >= 1, "quant_gemm: the scratch holds no permuted row");
  const int kt_count = static_cast<int>((k + kBK - 1) / kBK);
  for (int64_t r0 = 0; r0 < m; r0 += chunk) {
    const int64_t rows = std::min(chunk, m - r0);
    const T* a = x.as<const T>() + r0 * k;
    if (permuted) {
      T* xp = static_cast<T*>(scratch);
      permute_columns_kernel<T><<<elementwise_grid(rows * k), kElementwiseThreads, 0, stream>>>(
          a, w.input_perm.as<const int32_t>(), xp, rows, k);
      IB_CUDA_CHECK_LAUNCH("quant_gemm permute");
      a = xp;
    }
    int splits = splits_for(rows, n, k, partial_bytes, num_sms);
    const int kt_per_split = (kt_count + splits - 1) / splits;
    splits = (kt_count + kt_per_split - 1) / kt_per_split;
    const QuantGemmArgs args{a,
                             rows,
                             n,
                             k,
                             w.data.as<const uint8_t>(),
                             w.scales.data,
                             w.zeros.empty() ? nullptr : w.zeros.as<const uint8_t>(),
                             w.group_size,
                             bias != nullptr ? bias->data : nullptr,
                             out.as<T>() + r0 * n,
                             accumulate,
                             partials,
                             kt_per_split};
    const dim3 grid(static_cast<unsigned>((rows + kBM - 1) / kBM),
                    static_cast<unsigned>((n + kBN - 1) / kBN), static_cast<unsigned>(splits));
    launch_kernel("quant_gemm", false, quant_gemm_kernel<T, kCodes>, grid, dim3(kThreads),
                  kAheadSmemBytes, stream, args);
    if (splits > 1) {
      launch_kernel("quant_gemm finish", false, quant_gemm_finish_kernel<T, kCodes == Codes::kInt8>,
                    dim3(elementwise_grid(rows * n)), dim3(kElementwiseThreads), 0, stream, args,
                    splits);
    }
  }
}

template <Codes kCodes>
void launch_codes(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out,
                  bool accumulate, void* scratch, size_t scratch_bytes, int num_sms,
                  cudaStream_t stream) {
  if (x.dtype == DType::kBF16) {
    launch_typed<bf16, kCodes>(x, w, bias, out, accumulate, scratch, scratch_bytes, num_sms,
                               stream);
  } else {
    launch_typed<f16, kCodes>(x, w, bias, out, accumulate, scratch, scratch_bytes, num_sms, stream);
  }
}

}  // namespace

cudaError_t prepare_quant_gemm() {
  for (const cudaError_t err :
       {allow_shared_memory<bf16, Codes::kInt4>(), allow_shared_memory<bf16, Codes::kNf4>(),
        allow_shared_memory<bf16, Codes::kInt8>(), allow_shared_memory<f16, Codes::kInt4>(),
        allow_shared_memory<f16, Codes::kNf4>(), allow_shared_memory<f16, Codes::kInt8>()}) {
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

bool quant_gemm_takes(const Tensor& x, const WeightRef& w) {
  if ((x.dtype != DType::kBF16 && x.dtype != DType::kF16) || x.rank != 2 ||
      !w.quantized_layout_ok() || x.row_size() != w.cols())
    return false;
  const int64_t k = w.cols();
  if (k % 16 != 0 || !aligned16(x.data) || !aligned16(w.data.data)) return false;
  switch (w.format) {
    case WeightFormat::kInt4W4A16:
    case WeightFormat::kNf4:
      return w.group_size > 0 && w.group_size % kBK == 0;
    case WeightFormat::kInt8W8A16:
      return w.input_perm.empty();  // (act-order is a 4-bit layout's)
    default:
      return false;
  }
}

void launch_quant_gemm(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out,
                       bool accumulate, void* scratch, size_t scratch_bytes, int num_sms,
                       cudaStream_t stream) {
  IB_ASSERT(quant_gemm_takes(x, w) && out.dtype == x.dtype && out.rows() == x.rows() &&
                out.row_size() == w.rows() && (bias == nullptr || bias->dtype == x.dtype) &&
                scratch != nullptr && scratch_bytes >= kQuantGemmScratchBytes,
            "quant_gemm: x (M, K) bf16/fp16, a W4A16 / NF4 weight with groups of a multiple of 32 "
            "or an INT8 W8A16 one (K a multiple of 16), out (M, N) and bias (N) in x's dtype, the "
            "scratch of kQuantGemmScratchBytes");
  if (x.rows() == 0 || w.rows() == 0) return;
  switch (w.format) {
    case WeightFormat::kInt4W4A16:
      launch_codes<Codes::kInt4>(x, w, bias, out, accumulate, scratch, scratch_bytes, num_sms,
                                 stream);
      break;
    case WeightFormat::kNf4:
      launch_codes<Codes::kNf4>(x, w, bias, out, accumulate, scratch, scratch_bytes, num_sms,
                                stream);
      break;
    default:
      launch_codes<Codes::kInt8>(x, w, bias, out, accumulate, scratch, scratch_bytes, num_sms,
                                 stream);
      break;
  }
}

}  // namespace ib::cuda
