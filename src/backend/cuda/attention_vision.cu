// Bidirectional (unmasked) attention within each image's tokens for the vision encoders
// (VisionOps::bidirectional_attention), reading q, k and v straight from the packed qkv rows.
// bf16/f16 with head_dim 64 or 80: flash attention on tensor cores. A block owns 64 query rows of
// one image and one head (4 warps x 16 rows) and walks the image's keys in tiles of 64 through a
// two-stage cp.async ring in shared memory; S = Q K^T and O += P V run on m16n8k16 MMAs with fp32
// accumulation and the softmax is online (running max and sum per row), as attention_flash.cu
// does for the causal prefill, here without a causal mask: only the keys past the image's end in
// its last tile are masked. Other head dims and fp32: a warp per query row and head, the keys in
// chunks of 32 (one per lane), the softmax online across chunks, all in fp32.
#include <cmath>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/mma.cuh"
#include "backend/cuda/detail/mma_attention.cuh"
#include "backend/cuda/detail/vision_kernels.h"

namespace ib::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

// ---- the tensor-core kernel ----
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockQ = 64;  // query rows per block
constexpr int kBlockK = 64;  // keys per tile

struct VisionFlashParams {
  const void* qkv;  // (B S, 3 H hd)
  void* out;        // (B S, H hd)
  int seq_len;      // S
  int num_heads;    // H
  float scale_log2;
};

template <int HD>
constexpr size_t flash_smem_bytes() {
  return attention_smem_bytes<HD>(kBlockQ, kBlockK);
}

// grid (ceil(S / 64), H, B); dynamic shared memory flash_smem_bytes<HD>().
template <typename T, int HD>
__global__ void __launch_bounds__(kThreads) vision_flash_kernel(VisionFlashParams p) {
  constexpr int kP = attention_pitch<HD>();
  extern __shared__ uint4 smem_raw[];
  // q_s (kBlockQ, kP), then k_s and v_s (2, kBlockK, kP).
  const auto [q_s, k_s, v_s] = attention_tiles<T, HD>(smem_raw, kBlockQ, kBlockK);

  const int image = blockIdx.z;
  const int head = blockIdx.y;
  const int q_first = blockIdx.x * kBlockQ;  // within the image
  const int s_len = p.seq_len;
  const int rows_here = min(kBlockQ, s_len - q_first);
  const int width = p.num_heads * HD;
  const int64_t stride = 3 * int64_t{width};
  const T* base = static_cast<const T*>(p.qkv) + int64_t{image} * s_len * stride;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;

  const T* q_src = base + int64_t{q_first} * stride + int64_t{head} * HD;
  cp_async_rows<T, HD, kThreads>(q_s, kP, kBlockQ, q_src, stride, rows_here);
  const T* k_src = base + width + int64_t{head} * HD;
  const T* v_src = base + 2 * width + int64_t{head} * HD;
  const auto load_kv = [&](int tile, int buf) {
    cp_async_kv<T, HD, kThreads, kBlockK>(k_s + buf * kBlockK * kP, v_s + buf * kBlockK * kP, kP,
                                          k_src, v_src, [&](int r) -> int64_t {
                                            const int key = tile * kBlockK + r;
                                            return key < s_len ? key * stride : -1;
                                          });
  };
  const int num_tiles = (s_len + kBlockK - 1) / kBlockK;
  load_kv(0, 0);
  cp_async_commit();

  // This warp's 16 query rows: lane holds rows g = lane / 4 and g + 8.
  const int g = lane >> 2;
  const int tq = lane & 3;
  const bool warp_active = warp * 16 < rows_here;
  uint32_t qf[HD / 16][4];
  float o[HD / 8][4];
#pragma unroll
  for (int i = 0; i < HD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int buf = tile & 1;
    ring2_wait(tile + 1 < num_tiles, [&] { load_kv(tile + 1, buf ^ 1); });
    if (tile == 0) {
#pragma unroll
      for (int ks = 0; ks < HD / 16; ++ks)
        ldmatrix_x4(qf[ks], q_s + (warp * 16 + (lane & 15)) * kP + ks * 16 + (lane >> 4) * 8);
    }
    if (warp_active) {
      const T* kt = k_s + buf * kBlockK * kP;
      const T* vt = v_s + buf * kBlockK * kP;
      float s[kBlockK / 8][4];
#pragma unroll
      for (int i = 0; i < kBlockK / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < HD / 16; ++ks) {
#pragma unroll
        for (int np = 0; np < kBlockK / 16; ++np)
          mma_scores16<T>(qf[ks], kt + np * 16 * kP + ks * 16, kP, lane, s[2 * np], s[2 * np + 1]);
      }
      const int key0 = tile * kBlockK;
      const bool need_mask = key0 + kBlockK > s_len;  // only the image's last tile
#pragma unroll
      for (int ri = 0; ri < 2; ++ri) {
#pragma unroll
        for (int nt = 0; nt < kBlockK / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = key0 + nt * 8 + tq * 2 + e;
            s[nt][ri * 2 + e] =
                !need_mask || key < s_len ? s[nt][ri * 2 + e] * p.scale_log2 : -INFINITY;
          }
        }
      }
      // Tile 0 always holds a valid key, so the running max is finite from the first tile on.
      mma_softmax_step(s, m, l, o);
      // O += P V: P's accumulator layout is the A-operand layout of the next MMA.
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk)
        mma_pv16<T>(s[2 * kk], s[2 * kk + 1], vt + kk * 16 * kP, kP, lane, o);
    }
    __syncthreads();  // the next iteration's prefetch overwrites this buffer
  }

  if (!warp_active) return;
  T* out_base = static_cast<T*>(p.out) +
                (int64_t{image} * s_len + q_first + warp * 16) * int64_t{width} +
                int64_t{head} * HD;
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    const float sum = mma_row_sum(l[ri]);
    const int row = g + ri * 8;
    if (warp * 16 + row >= rows_here) continue;
    const float inv = 1.0f / sum;
    T* dst = out_base + int64_t{row} * width + tq * 2;
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt)
      *reinterpret_cast<uint32_t*>(dst + dt * 8) =
          pack2<T>(o[dt][ri * 2] * inv, o[dt][ri * 2 + 1] * inv);
  }
}

template <typename T, int HD>
void launch_flash(const VisionFlashParams& p, int64_t num_images, cudaStream_t stream) {
  constexpr size_t kSmem = flash_smem_bytes<HD>();
  IB_CUDA_CHECK(
      cudaFuncSetAttribute(vision_flash_kernel<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kSmem)),
      "bidirectional_attention");
  const dim3 grid(static_cast<unsigned>((p.seq_len + kBlockQ - 1) / kBlockQ),
                  static_cast<unsigned>(p.num_heads), static_cast<unsigned>(num_images));
  vision_flash_kernel<T, HD><<<grid, kThreads, kSmem, stream>>>(p);
}

// ---- the fallback: a warp per (query row, head) ----
constexpr int kSimpleWarps = 4;
constexpr int kPerLane = kVisionMaxHeadDim / 32;  // output elements a lane owns, at most

// grid (ceil(B S H / kSimpleWarps)); dynamic shared memory kSimpleWarps * hd floats (the q rows).
template <typename T>
__global__ void __launch_bounds__(kSimpleWarps * 32)
    vision_attention_simple_kernel(const T* qkv, T* out, int64_t tasks, int seq_len, int num_heads,
                                   int hd, float scale_log2) {
  extern __shared__ float q_s[];  // (kSimpleWarps, hd)
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int64_t task = blockIdx.x * int64_t{kSimpleWarps} + warp;  // row * H + head
  if (task >= tasks) return;
  const int64_t row = task / num_heads;
  const int head = static_cast<int>(task % num_heads);
  const int64_t width = int64_t{num_heads} * hd;
  const int64_t stride = 3 * width;
  const int64_t first = row / seq_len * seq_len;
  float* q = q_s + warp * hd;
  for (int i = lane; i < hd; i += 32) q[i] = to_f32(qkv[row * stride + int64_t{head} * hd + i]);
  __syncwarp();
  const T* k_base = qkv + first * stride + width + int64_t{head} * hd;
  const T* v_base = k_base + width;
  float acc[kPerLane];
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) acc[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int j0 = 0; j0 < seq_len; j0 += 32) {
    const int j = j0 + lane;
    float s = -INFINITY;
    if (j < seq_len) {
      const T* k = k_base + int64_t{j} * stride;
      float dot = 0.0f;
      for (int i = 0; i < hd; ++i) dot += q[i] * to_f32(k[i]);
      s = dot * scale_log2;
    }
    const float m_new = fmaxf(m, warp_max(s));  // finite: chunk 0 holds key 0
    const float alpha = exp2f(m - m_new);
    const float pj = exp2f(s - m_new);
    l = l * alpha + warp_sum(pj);
    m = m_new;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) acc[c] *= alpha;
    const int count = min(32, seq_len - j0);
    for (int jj = 0; jj < count; ++jj) {
      const float w = __shfl_sync(0xffffffffu, pj, jj);
      const T* v = v_base + int64_t{j0 + jj} * stride;
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) {
        const int i = lane + 32 * c;
        if (i < hd) acc[c] += w * to_f32(v[i]);
      }
    }
  }
  T* o = out + row * width + int64_t{head} * hd;
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int i = lane + 32 * c;
    if (i < hd) o[i] = from_f32<T>(acc[c] / l);
  }
}

}  // namespace

bool vision_flash_supported(const Tensor& qkv, int head_dim, const Tensor& out) {
  const bool half = qkv.dtype == DType::kBF16 || qkv.dtype == DType::kF16;
  const int64_t row_bytes = qkv.row_size() * 2;
  return half && (head_dim == 64 || head_dim == 80) && aligned16(qkv.data) && row_bytes % 16 == 0 &&
         (reinterpret_cast<uintptr_t>(out.data) & 3u) == 0;
}

void launch_bidirectional_attention(const Tensor& qkv, int64_t seq_len, int num_heads, float scale,
                                    Tensor out, cudaStream_t stream) {
  const int64_t t = qkv.rows();
  if (t == 0) return;
  const auto hd = static_cast<int>(out.row_size() / num_heads);
  IB_ASSERT(hd <= kVisionMaxHeadDim, "bidirectional_attention: head_dim at most 256");
  IB_ASSERT(seq_len <= int64_t{1} << 30, "bidirectional_attention: sequence too long");
  const float scale_log2 = scale * kLog2e;
  if (vision_flash_supported(qkv, hd, out)) {
    const VisionFlashParams p{qkv.data, out.data, static_cast<int>(seq_len), num_heads, scale_log2};
    const int64_t images = t / seq_len;
    const bool bf = qkv.dtype == DType::kBF16;
    if (hd == 64) {
      bf ? launch_flash<bf16, 64>(p, images, stream) : launch_flash<f16, 64>(p, images, stream);
    } else {
      bf ? launch_flash<bf16, 80>(p, images, stream) : launch_flash<f16, 80>(p, images, stream);
    }
    IB_CUDA_CHECK_LAUNCH("bidirectional_attention");
    return;
  }
  const int64_t tasks = t * num_heads;
  const auto blocks = static_cast<unsigned>((tasks + kSimpleWarps - 1) / kSimpleWarps);
  const auto smem = static_cast<size_t>(kSimpleWarps * hd) * sizeof(float);
  IB_DISPATCH_FLOAT(qkv.dtype, T, {
    vision_attention_simple_kernel<T><<<blocks, kSimpleWarps * 32, smem, stream>>>(
        qkv.as<const T>(), out.as<T>(), tasks, static_cast<int>(seq_len), num_heads, hd,
        scale_log2);
  });
  IB_CUDA_CHECK_LAUNCH("bidirectional_attention");
}

}  // namespace ib::cuda
