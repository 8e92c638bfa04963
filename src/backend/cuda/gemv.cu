// The decode GEMM (detail/gemv_kernel.cuh) at the configuration chosen by bench/gpu measurements
// on the H200: see bench/NOTES.md.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/gemv_kernel.cuh"
#include "backend/cuda/detail/gemv_x_shared.h"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace {

// Measured on the H200 against 5 other configurations (bench/NOTES.md, run 2): 8 warps with
// 2 interleaved steps in flight was fastest on every Llama-3-8B shape but one.
constexpr int kWarps = 8;
constexpr int kUnroll = 2;
constexpr bool kAdjacent = false;
// Quantized weights load 16 bytes per row and step where bf16 loads 32: twice the steps in flight
// keep as many bytes in flight (bench/NOTES.md, INT8 run 2; the macro is for that A/B only).
#ifndef IB_GEMV_QUANT_UNROLL
#define IB_GEMV_QUANT_UNROLL 4
#endif
constexpr int kQuantUnroll = IB_GEMV_QUANT_UNROLL;
// W4A16: 2 steps in flight (its x, 32 values per lane and step, loaded step by step) and 3
// blocks per SM. bench/NOTES.md, W4A16: 2 steps at 2 blocks per SM streamed 1.3-1.9 TB/s, 4 steps
// no faster.
#ifndef IB_GEMV_INT4_UNROLL
#define IB_GEMV_INT4_UNROLL 2
#endif
constexpr int kInt4Unroll = IB_GEMV_INT4_UNROLL;

// IB_GEMV_PERSIST (backend/kernel_switches.h): blocks per SM of a persistent grid for the
// quantized formats' GEMVs, which then loop over row tiles, each block loading its next tile's
// first weights during the current tile's epilogue; 0: one block per row tile.
std::atomic<int> g_persist_blocks_per_sm{0};

// IB_GEMV_RING (backend/kernel_switches.h): the quantized formats' GEMVs of 1-4 and 9-16 tokens
// stream their weights through a ring of kGemvRingSteps steps per warp in shared memory
// (gemv_kernel's kRing), the others through registers (kQuantUnroll / kInt4Unroll steps); 0: all
// through registers. bench/NOTES.md, "The cp.async ring": at 1-4 tokens about even in the op
// benchmark and +1.5 % at batch 1 (the fused GEMVs), 9-16 -13 % per layer, 8 tokens +7 %.
#ifndef IB_GEMV_RING_STEPS
#define IB_GEMV_RING_STEPS 4
#endif
constexpr int kGemvRingSteps = IB_GEMV_RING_STEPS;
std::atomic<bool> g_gemv_ring{true};

// IB_GEMV_DENSE_RING (backend/kernel_switches.h): the dense GEMVs of 1-8 tokens (x's dtype out)
// stream their weights through a ring of kGemvRingSteps steps per warp in dynamic shared memory
// (64 KB a block; 3 blocks per SM), not registers. Written for qkv and o at batch 8, which stream
// at 2.5-2.8 TB/s in 4 dependent rounds of 2 steps per warp (bench/NOTES.md, "Three blocks per
// SM"); off until measured.
std::atomic<bool> g_dense_ring{false};

// IB_GEMV_INT4_WARPS (backend/kernel_switches.h): the warps per block of the W4A16 ring GEMVs at
// 1-4 tokens (8, 4 or 2; 0: by the launch's row tiles, int4_ring_warps); each block's registers
// are capped as 3 blocks of 8 warps' are, so an SM holds the same 24 warps. On the H200 (bench/
// NOTES.md, "IB_GGUF_WIDE and warps per block"): 4 warps won on gate/up (1,792 tiles; 29.6 ->
// 26.8 us at 1 token) and lost on qkv, o and down (384 and 256 tiles: fewer warps in all); 2 lost
// on every shape. 0 (the default) is that rule: awq batch 1 342 -> 367 tok/s.
std::atomic<int> g_int4_warps{0};

// IB_GEMV_STAGE_X and IB_GEMV_FUSE_QUANT (detail/gemv_x_shared.h): the quantized GEMVs of one
// token through the ring hold x in each block's shared memory (gemv_kernel's kXShared), so a
// step's x comes from there, not from global memory right before its MMAs (where the fp8 GEMV's
// stall samples sat). Measured on an H100 at batch 1 (bench/NOTES.md, "Batch 1 in the 8-bit and
// 4-bit formats"): W8A16 +7.5-8.6 %, so IB_GEMV_STAGE_X=1 (the default) stages W8A16's x; 2
// stages every format's (W8A8 the quantize kernel's codes: fp8 -6 %; awq even, nf4 -4 %).
// IB_GEMV_FUSE_QUANT=1 quantizes W8A8's x in each block instead of after the quantize kernel
// (fp8 -4 %, int8-w8a8 -7 %: the blocks' prologues cost more than the kernel; default 0).
std::atomic<bool> g_fuse_quant{false};
std::atomic<int> g_stage_x{1};
// IB_GEMV_STAGE_NORM (detail/gemv_x_shared.h): the staged W8A16 / 4-bit GEMVs of a fused op
// normalise x in each block (detail/norm_row.cuh) instead of after the norm kernel. On an H100
// at batch 1 (bench/NOTES.md, "The norm kernels of the W8A16 and 4-bit steps"): int8 280.0 ->
// 284.7 tok/s (+1.7 %), so on by default; it takes effect where x is staged (IB_GEMV_STAGE_X),
// which stays off for awq and nf4 (staged and normalised there: -3.6 % and -2.7 %).
std::atomic<bool> g_stage_norm{true};
std::atomic<int64_t> g_x_shared_launches{0};
std::atomic<int64_t> g_x_norm_launches{0};

// The most shared memory x takes (kXShared): 48 KB (W8A8 at k = 14,336: 42 KB; with the
// ring's 37 KB, 2 blocks per SM).
constexpr int64_t kXSharedMaxBytes = 49152;

int int4_ring_warps(unsigned tiles) {
  const int warps = g_int4_warps.load(std::memory_order_relaxed);
  if (warps != 0) return warps;
  return tiles >= 1024 ? 4 : 8;
}

// IB_GEMV_SWIGLU_BLOCKS (backend/kernel_switches.h): 3 (the default) caps the dense gate/up
// GEMV's registers at 80 so that 3 blocks of 8 warps fit on an SM; 0 leaves them to the compiler
// (92: 2 blocks). On the H200 at batch 1 the gate/up step went from 62.6 to 58.2 µs per layer;
// the other dense GEMVs and the attention after qkv lost at 3 blocks (bench/NOTES.md, "Three
// blocks per SM").
std::atomic<int> g_swiglu_min_blocks{3};

// IB_GEMV_QKV_BLOCKS (backend/kernel_switches.h): the dense q/k/v GEMV (RMSNorm + q/k/v +
// RoPE/cache) of launches of at least this many tokens with its registers capped so that 3
// blocks fit on an SM (0: never). Its 384 row tiles (Llama-3-8B) then run in one wave of 396
// slots instead of 1.45 of 264. Default 2 (one-token launches keep 2 blocks, where the attention
// after it lost more than it gained): Llama-3-8B bf16 seed protocol 1,779 / 1,789 -> 1,818 /
// 1,823 tok/s (bench/NOTES.md, "The q/k/v variant, IB_PDL=1 and IB_MOE_ADD_NORM=2: measured").
std::atomic<int> g_qkv_blocks_from{2};

// IB_LORA_QKV_BLOCKS (backend/kernel_switches.h): 1 gives the LoRA q/k/v GEMV the base's 3-blocks
// register cap where IB_GEMV_QKV_BLOCKS gives it to the base (the LoRA variant ran 2 blocks an SM,
// its 384 row tiles in 1.45 waves: +6.1 us of advance a layer against the base's on an H100,
// bench/results/h100/lora-attn/run1). The default: at 3 blocks the q/k/v advance is 16.9 us a
// layer against the base's 15.7, one rank-16 adapter's overhead 11.8 % against 12.9 % at 2 blocks
// (bench/results/h100/lora-qkv-blocks/run1); 0: 2 blocks.
std::atomic<bool> g_lora_qkv_three{true};

// Whether a dense q/k/v GEMV of m tokens takes the 3-blocks variant (IB_GEMV_QKV_BLOCKS).
bool qkv_three_blocks(int64_t m) {
  const int from = g_qkv_blocks_from.load(std::memory_order_relaxed);
  return from > 0 && m >= from;
}

int sm_count() {
  static const int count = [] {
    int device = 0, value = 0;
    IB_CUDA_CHECK(cudaGetDevice(&device), "gemv: cudaGetDevice");
    IB_CUDA_CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, device),
                  "gemv: the SM count");
    return value;
  }();
  return count;
}

// The grid of a launch over `tiles` row tiles.
template <int kW>
unsigned grid_blocks(unsigned tiles) {
  const int per_sm = g_persist_blocks_per_sm.load(std::memory_order_relaxed);
  if (kW == kGemvDense || per_sm == 0) return tiles;
  return std::min(tiles, static_cast<unsigned>(per_sm * sm_count()));
}

// The quantized operands of a launch: the weight's row scales and x's token scales.
GemvQuant quant_operands(const WeightRef& w, const GemvQuantAct* act) {
  GemvQuant q;
  if (is_8bit(w.format)) q.w_scales = w.scales.as<float>();
  if (w.format == WeightFormat::kNf4) {
    q.g_absmax = w.scales.as<float>();
    q.groups = static_cast<int>(w.scales.dim(1));
  }
  if (w.format == WeightFormat::kInt4W4A16) {
    q.g_scales = static_cast<const uint16_t*>(w.scales.data);
    q.g_zeros = w.zeros.as<uint8_t>();
    q.groups = static_cast<int>(w.scales.dim(1));
    q.steps_per_group = w.group_size / kGemvInt4StepK;
    if (q.steps_per_group > 0 && (q.steps_per_group & (q.steps_per_group - 1)) == 0)
      q.steps_shift = __builtin_ctz(static_cast<unsigned>(q.steps_per_group));
  }
  q.x_scales = act ? act->scales.as<float>() : nullptr;
  q.zero = static_act_quant(w).zero();
  if (q.zero != 0) {
    IB_ASSERT(w.input_row_sums.dtype == DType::kI32 && w.input_row_sums.numel() == w.rows(),
              "quantized GEMV: an asymmetric static activation scale needs the weight's row sums");
    q.row_sums = w.input_row_sums.as<int32_t>();
  }
  return q;
}

// W8A8 (FP8, INT8): x (times the gain, normalised where rms) quantized per token into act's
// first M rows, the GEMV's input.
GemvQuantAct quantize_act(const Tensor& x, const Tensor* gain, float eps, bool rms,
                          const GemvQuantAct* act, const WeightRef& w, cudaStream_t stream,
                          bool pdl) {
  const DType code = w.data.dtype;
  IB_ASSERT(act != nullptr && act->xq.dtype == code && act->xq.row_size() == x.row_size() &&
                act->xq.rows() >= x.rows() && act->scales.numel() >= x.rows() &&
                aligned16(act->xq.data),
            "quantized GEMV: activation scratch of at least (M, K) codes and (M) scales expected");
  GemvQuantAct q;
  q.xq = act->xq.slice_rows(0, x.rows());
  q.scales = act->scales.reshaped({act->scales.numel(), 1}).slice_rows(0, x.rows());
  if (launch_quantize_rms_rows(x, gain, eps, rms, q.xq, q.scales, stream, pdl, static_act_quant(w),
                               act->sync))
    q.sync = act->sync;  // IB_QUANT_SYNC: the GEMV waits for the kernel's blocks by this flag
  return q;
}

// One GEMV launch over the weight's row tiles (gemv_tile_count). W8A8 weights read x quantized by
// quantize_act first; W8A16 weights of a fused op read rms_norm(x) * gain written by the norm
// kernel first.
template <typename T, typename TOut, int NT, int kEpilogue, bool kRms, int kW>
void launch_config(const char* op, const Tensor& x, const WeightRef& w, const T* bias, Tensor out,
                   float eps, const GemvRopeCache& rc, const Tensor* gain, const GemvQuantAct* act,
                   cudaStream_t stream, bool pdl, const GemvLora& lora = {}) {
  const int m = static_cast<int>(x.rows());
  const int n = static_cast<int>(w.data.dim(0));
  const int k = static_cast<int>(w.cols());
  constexpr bool kDense = kW == kGemvDense;
  constexpr bool k4bit = kW == kGemvInt4 || kW == kGemvNf4;
  // W8A16 and the 4-bit formats normalise x before the kernel (a norm kernel): applied in the
  // 4-bit kernel it cost more than the norm kernel (bench/NOTES.md, 4-bit run5).
  constexpr bool kXNormed = kW == kGemvInt8 || k4bit;
  constexpr int kSteps = kDense ? kUnroll : (k4bit ? kInt4Unroll : kQuantUnroll);
  constexpr bool kAdj = kAdjacent && kDense;
  constexpr bool kKernelRms = kRms && !kXNormed;
  const void* x_in = x.data;
  GemvQuant operands = quant_operands(w, nullptr);
  constexpr bool kW8A8 = kW == kGemvFp8 || kW == kGemvInt8A8;
  // kXShared: one token of a quantized weight through the ring, x rows of 2-byte values;
  // IB_GEMV_STAGE_X (x, or W8A8's codes after the quantize kernel) or, for W8A8, before it
  // IB_GEMV_FUSE_QUANT (x quantized in the block, no quantize kernel).
  [[maybe_unused]] bool x_shared = false;
  [[maybe_unused]] const bool fused = kW8A8 && g_fuse_quant.load(std::memory_order_relaxed);
  // IB_GEMV_STAGE_NORM: W8A16 / 4-bit x normalised in the block that stages it, no norm kernel.
  [[maybe_unused]] const bool norm_here =
      kXNormed && kRms && gain != nullptr && g_stage_norm.load(std::memory_order_relaxed);
  [[maybe_unused]] const size_t x_shared_bytes =
      gemv_x_shared_bytes(kW8A8, fused || norm_here, gain != nullptr, k, sizeof(T));
  if constexpr (!kDense && NT == 1 && sizeof(T) == 2) {
    const int stage = g_stage_x.load(std::memory_order_relaxed);
    const bool raw_x = fused || norm_here;  // x itself, not the quantize or norm kernel's output
    x_shared = (fused || stage >= (kW == kGemvInt8 ? 1 : 2)) &&
               g_gemv_ring.load(std::memory_order_relaxed) && m == 1 && lora.slot_ids == nullptr &&
               k % 16 == 0 && x_shared_bytes <= size_t{kXSharedMaxBytes} &&
               (!raw_x || (aligned16(x.data) && (gain == nullptr || aligned16(gain->data))));
  }
  if constexpr (kW8A8) {
    if (x_shared && fused) {
      operands.q_gain = gain ? gain->data : nullptr;
      operands.q_fixed = static_act_quant(w);
    } else {
      const GemvQuantAct q = quantize_act(x, gain, eps, kRms, act, w, stream, pdl);
      x_in = q.xq.data;
      operands = quant_operands(w, &q);
      operands.sync = q.sync;
      operands.sync_blocks = static_cast<unsigned>(m);  // one quantize block a token
    }
  } else if constexpr (kXNormed && kRms) {
    if (x_shared && norm_here) {
      operands.q_gain = gain->data;  // the block normalises x (kXShared's prologue)
    } else {
      IB_ASSERT(gain != nullptr && act != nullptr && act->xn.dtype == x.dtype &&
                    act->xn.numel() >= x.numel() && aligned16(act->xn.data),
                "W8A16 / 4-bit GEMV: a norm gain and a normalised-x scratch of (M, K) expected");
      Tensor xn =
          act->xn.reshaped({act->xn.numel() / x.row_size(), x.row_size()}).slice_rows(0, x.rows());
      if (launch_rms_norm(nullptr, x, *gain, eps, xn, stream, pdl, act->sync)) {
        operands.sync = act->sync;  // IB_QUANT_SYNC: the GEMV waits for its blocks by this flag
        operands.sync_blocks = static_cast<unsigned>(m);  // one norm block a token
      }
      x_in = xn.data;
    }
  }
  if (!fused && !aligned16(x_in)) {  // the quantize or norm kernel's output, or x
    IB_ASSERT(operands.q_gain == nullptr, "gemv: x normalised in the block must stay staged");
    x_shared = false;
  }
  auto kernel = gemv_kernel<T, TOut, NT, kWarps, kSteps, kAdj, kEpilogue, kKernelRms, kW>;
  // The 3-blocks-an-SM variant: gate/up by IB_GEMV_SWIGLU_BLOCKS, q/k/v by IB_GEMV_QKV_BLOCKS.
  if constexpr (kDense && (kEpilogue == kGemvSwiGlu || kEpilogue == kGemvRopeCache)) {
    const bool three = kEpilogue == kGemvSwiGlu
                           ? g_swiglu_min_blocks.load(std::memory_order_relaxed) == 3
                           : qkv_three_blocks(m);
    if (three)
      kernel = gemv_kernel<T, TOut, NT, kWarps, kSteps, kAdj, kEpilogue, kKernelRms, kW, 3>;
  }
  int block_warps = kWarps;
  size_t smem = 0;
  // IB_GEMV_DENSE_RING: the dense ring variant (its 64 KB of shared memory allowed at each launch:
  // the allowance is the current device's, and tensor-parallel ranks launch on several).
  if constexpr (kDense && NT == 1 && std::is_same_v<T, TOut>) {
    if (g_dense_ring.load(std::memory_order_relaxed) && lora.slot_ids == nullptr) {
      kernel = gemv_kernel<T, TOut, NT, kWarps, kSteps, kAdj, kEpilogue, kKernelRms, kW, 3, false,
                           false, kGemvRingSteps>;
      smem = gemv_ring_smem_bytes(kGemvRingSteps, kWarps);
      IB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)),
                    op);
    }
  }
  // The ring where it measured faster (bench/NOTES.md, "The cp.async ring"): 1-4 tokens and two
  // n-tiles; four n-tiles' partial sums and the ring would exceed 48 KB of shared memory.
  if constexpr (!kDense && NT <= 2) {
    if (g_gemv_ring.load(std::memory_order_relaxed) && (m <= 4 || NT == 2)) {
      kernel = gemv_kernel<T, TOut, NT, kWarps, kSteps, kAdj, kEpilogue, kKernelRms, kW, 3, false,
                           false, kGemvRingSteps>;
      if constexpr (NT == 1 && sizeof(T) == 2) {
        if (x_shared) {
          kernel = gemv_kernel<T, TOut, NT, kWarps, kSteps, kAdj, kEpilogue, kKernelRms, kW, 3,
                               false, false, kGemvRingSteps, true>;
        }
      }
      // IB_GEMV_INT4_WARPS: W4A16 at 1-4 tokens with fewer warps per block (one block per tile).
      if constexpr (kW == kGemvInt4 && NT == 1) {
        const int warps = int4_ring_warps(static_cast<unsigned>(gemv_tile_count(kEpilogue, n)));
        if (m <= 4 && g_persist_blocks_per_sm.load(std::memory_order_relaxed) == 0 && warps != 8) {
          block_warps = warps == 4 ? 4 : 2;
          if (x_shared) {
            kernel = warps == 4 ? gemv_kernel<T, TOut, NT, 4, kSteps, kAdj, kEpilogue, kKernelRms,
                                              kW, 6, false, false, kGemvRingSteps, true>
                                : gemv_kernel<T, TOut, NT, 2, kSteps, kAdj, kEpilogue, kKernelRms,
                                              kW, 12, false, false, kGemvRingSteps, true>;
          } else {
            kernel = warps == 4 ? gemv_kernel<T, TOut, NT, 4, kSteps, kAdj, kEpilogue, kKernelRms,
                                              kW, 6, false, false, kGemvRingSteps>
                                : gemv_kernel<T, TOut, NT, 2, kSteps, kAdj, kEpilogue, kKernelRms,
                                              kW, 12, false, false, kGemvRingSteps>;
          }
        }
      }
      if constexpr (NT == 1 && sizeof(T) == 2) {
        if (x_shared) {
          smem = x_shared_bytes;
          g_x_shared_launches.fetch_add(1, std::memory_order_relaxed);
          if (!kW8A8 && operands.q_gain != nullptr)
            g_x_norm_launches.fetch_add(1, std::memory_order_relaxed);
          IB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem)),
                        op);
        }
      }
    }
  }
  const auto tiles = static_cast<unsigned>(gemv_tile_count(kEpilogue, n));
  if constexpr (NT == 1 && kEpilogue != kGemvStore) {
    if (lora.slot_ids != nullptr) {
      // The LoRA variant (GemvLora): its own register budget (2 blocks of 8 warps per SM for the
      // dense rope / residual GEMVs, 3 for the others, as their base variants run by default)
      // and the staged operands in dynamic shared memory.
      constexpr int kLoraMinBlocks = kDense && kEpilogue != kGemvSwiGlu ? 2 : 3;
      IB_ASSERT(lora.rank % 8 == 0 && lora.rank <= kGemvLoraMaxRank && m <= 8,
                "gemv: LoRA ranks are multiples of 8 up to kGemvLoraMaxRank, 8 tokens at most");
      // A chained shrink reads whole 16-byte runs of A over a tile's output features; an
      // un-normalised u needs the kernel's own 1 / rms.
      const int n_out = kEpilogue == kGemvSwiGlu ? n / 2 : n;
      IB_ASSERT(lora.next_u == nullptr || (kDense && kEpilogue != kGemvRopeCache &&
                                           n_out % kGemvRows == 0 && lora.next.count >= 1),
                "gemv: a chained LoRA shrink needs a dense weight, the SwiGLU or residual "
                "epilogue and whole tiles");
      IB_ASSERT(!lora.u_rms || (kKernelRms && kDense),
                "gemv: an un-normalised LoRA u needs the dense kernel's own norm");
      const size_t smem = gemv_lora_smem_bytes(lora.group.count, lora.rank, sizeof(T));
      auto lora_kernel = gemv_kernel<T, TOut, NT, kWarps, kSteps, kAdj, kEpilogue, kKernelRms, kW,
                                     kLoraMinBlocks, true>;
      if constexpr (kDense && kEpilogue == kGemvRopeCache) {
        if (g_lora_qkv_three.load(std::memory_order_relaxed) && qkv_three_blocks(m)) {
          lora_kernel =
              gemv_kernel<T, TOut, NT, kWarps, kSteps, kAdj, kEpilogue, kKernelRms, kW, 3, true>;
        }
      }
      // The chained-shrink variant (GemvLora::next_u) is its own instantiation: its epilogue
      // needs registers the other LoRA GEMVs should not pay for (ptxas: spills at 80).
      if constexpr (kDense && kEpilogue != kGemvRopeCache) {
        if (lora.next_u != nullptr) {
          lora_kernel = gemv_kernel<T, TOut, NT, kWarps, kSteps, kAdj, kEpilogue, kKernelRms, kW,
                                    kLoraMinBlocks, true, true>;
        }
      }
      if (smem > 40 * 1024) {  // with the static part, past the default 48 KB
        IB_CUDA_CHECK(cudaFuncSetAttribute(lora_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)),
                      op);
      }
      launch_kernel(op, pdl, lora_kernel, dim3(grid_blocks<kW>(tiles)), dim3(kWarps * 32), smem,
                    stream, x_in, w.data.data, bias, out.as<TOut>(), m, n, k, eps, rc, operands,
                    lora);
      return;
    }
  }
  launch_kernel(op, pdl, kernel, dim3(grid_blocks<kW>(tiles)), dim3(block_warps * 32), smem, stream,
                x_in, w.data.data, bias, out.as<TOut>(), m, n, k, eps, rc, operands, GemvLora{});
}

template <typename T, typename TOut, int NT, int kW>
void launch_nt(const Tensor& x, const WeightRef& w, const T* bias, Tensor out, cudaStream_t stream,
               bool pdl, const GemvQuantAct* act) {
  launch_config<T, TOut, NT, kGemvStore, false, kW>("matmul(gemv)", x, w, bias, out, 0.0f,
                                                    GemvRopeCache{}, nullptr, act, stream, pdl);
}

template <typename T, typename TOut, int kW>
void launch_typed(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out,
                  cudaStream_t stream, bool pdl, const GemvQuantAct* act) {
  const T* b = bias ? bias->as<T>() : nullptr;
  const int64_t m = x.rows();
  if constexpr (kW == kGemvFp8 || kW == kGemvInt8A8) {  // up to 8 tokens (gemv_supported)
    launch_nt<T, TOut, 1, kW>(x, w, b, out, stream, pdl, act);
  } else if (m <= 8) {
    launch_nt<T, TOut, 1, kW>(x, w, b, out, stream, pdl, act);
  } else if constexpr (kW == kGemvInt4 || kW == kGemvNf4) {  // up to 16 (gemv_max_m)
    launch_nt<T, TOut, 2, kW>(x, w, b, out, stream, pdl, act);
  } else if (m <= 16) {
    launch_nt<T, TOut, 2, kW>(x, w, b, out, stream, pdl, act);
  } else {
    launch_nt<T, TOut, 4, kW>(x, w, b, out, stream, pdl, act);
  }
}

// The fused decode variants, M <= 8 (one n-tile).
template <typename T, int kEpilogue, bool kRms, int kW>
void launch_fused_typed(const Tensor& x, const WeightRef& w, const Tensor* gain, const Tensor* bias,
                        Tensor out, float eps, cudaStream_t stream, bool pdl,
                        const GemvQuantAct* act, const GemvLora* lora,
                        const GemvRopeCache& rc = {}) {
  launch_config<T, T, 1, kEpilogue, kRms, kW>("matmul(gemv, fused)", x, w,
                                              bias ? bias->as<T>() : nullptr, out, eps, rc, gain,
                                              act, stream, pdl, lora ? *lora : GemvLora{});
}

template <typename T, int kW>
void launch_fused(const Tensor& x, const WeightRef& w, const Tensor* gain, const Tensor* bias,
                  Tensor out, GemvFusion fusion, float eps, cudaStream_t stream, bool pdl,
                  const GemvQuantAct* act, const GemvLora* lora) {
  switch (fusion) {
    case GemvFusion::kRmsSwiGlu:
      return launch_fused_typed<T, kGemvSwiGlu, true, kW>(x, w, gain, bias, out, eps, stream, pdl,
                                                          act, lora);
    case GemvFusion::kAccumulate:
      return launch_fused_typed<T, kGemvAccumulate, false, kW>(x, w, gain, bias, out, eps, stream,
                                                               pdl, act, lora);
  }
}

// Calls f.template operator()<T, kW>() for x's dtype (bf16 or f16) and w's format.
template <typename F>
void dispatch(const Tensor& x, const WeightRef& w, F&& f) {
  const auto for_type = [&]<typename T>() {
    switch (w.format) {
      case WeightFormat::kDense:
        return f.template operator()<T, kGemvDense>();
      case WeightFormat::kFp8E4M3:
        return f.template operator()<T, kGemvFp8>();
      case WeightFormat::kInt8W8A16:
        return f.template operator()<T, kGemvInt8>();
      case WeightFormat::kInt8W8A8:
        return f.template operator()<T, kGemvInt8A8>();
      case WeightFormat::kInt4W4A16:
        return f.template operator()<T, kGemvInt4>();
      case WeightFormat::kNf4:
        return f.template operator()<T, kGemvNf4>();
      case WeightFormat::kGguf:  // gguf.cu (gemv_weight_ok refuses it here)
        break;
    }
    IB_ASSERT(false, "gemv: a weight format without a kernel");
  };
  if (x.dtype == DType::kBF16) {
    for_type.template operator()<bf16>();
  } else {
    for_type.template operator()<f16>();
  }
}

}  // namespace

void set_gemv_persist_blocks_per_sm(int blocks) {
  g_persist_blocks_per_sm.store(blocks, std::memory_order_relaxed);
}

int gemv_persist_blocks_per_sm() {
  return g_persist_blocks_per_sm.load(std::memory_order_relaxed);
}

void set_gemv_swiglu_min_blocks(int blocks) {
  g_swiglu_min_blocks.store(blocks, std::memory_order_relaxed);
}

int gemv_swiglu_min_blocks() {
  return g_swiglu_min_blocks.load(std::memory_order_relaxed);
}

void set_gemv_qkv_blocks_from(int tokens) {
  g_qkv_blocks_from.store(tokens, std::memory_order_relaxed);
}

int gemv_qkv_blocks_from() {
  return g_qkv_blocks_from.load(std::memory_order_relaxed);
}

void set_lora_qkv_blocks(bool three) {
  g_lora_qkv_three.store(three, std::memory_order_relaxed);
}

bool lora_qkv_blocks() {
  return g_lora_qkv_three.load(std::memory_order_relaxed);
}

void set_gemv_ring(bool on) {
  g_gemv_ring.store(on, std::memory_order_relaxed);
}

bool gemv_ring() {
  return g_gemv_ring.load(std::memory_order_relaxed);
}

void set_gemv_dense_ring(bool on) {
  g_dense_ring.store(on, std::memory_order_relaxed);
}

bool gemv_dense_ring() {
  return g_dense_ring.load(std::memory_order_relaxed);
}

void set_gemv_int4_warps(int warps) {
  IB_ASSERT(warps == 8 || warps == 4 || warps == 2 || warps == 0,
            "set_gemv_int4_warps: 8, 4, 2 or 0 (by the launch's row tiles)");
  g_int4_warps.store(warps, std::memory_order_relaxed);
}

int gemv_int4_warps() {
  return g_int4_warps.load(std::memory_order_relaxed);
}

void set_gemv_fuse_quant(bool on) {
  g_fuse_quant.store(on, std::memory_order_relaxed);
}

bool gemv_fuse_quant() {
  return g_fuse_quant.load(std::memory_order_relaxed);
}

void set_gemv_stage_norm(bool on) {
  g_stage_norm.store(on, std::memory_order_relaxed);
}

bool gemv_stage_norm() {
  return g_stage_norm.load(std::memory_order_relaxed);
}

void set_gemv_stage_x(int formats) {
  IB_ASSERT(formats >= 0 && formats <= 2, "set_gemv_stage_x: 0, 1 (W8A16) or 2 (every format)");
  g_stage_x.store(formats, std::memory_order_relaxed);
}

int gemv_stage_x() {
  return g_stage_x.load(std::memory_order_relaxed);
}

int64_t gemv_x_shared_launches() {
  return g_x_shared_launches.load(std::memory_order_relaxed);
}

int64_t gemv_x_norm_launches() {
  return g_x_norm_launches.load(std::memory_order_relaxed);
}

void launch_gemv_rope_cache(const Tensor& x, const Tensor* gain, const WeightRef& w,
                            const Tensor* bias, float eps, const Tensor& positions,
                            const Tensor& slot_mapping, const Tensor& inv_freq,
                            const KvCacheLayer& kv, const AttentionShape& shape, Tensor qkv,
                            cudaStream_t stream, bool pdl, const GemvQuantAct* act,
                            const GemvLora* lora) {
  IB_ASSERT(gemv_rope_cache_supported(x, w, shape), "launch_gemv_rope_cache: unsupported operands");
  IB_ASSERT(is_quantized(w.format) || gain == nullptr,
            "launch_gemv_rope_cache: a dense weight has its gain folded");
  const bool cache_fp8 = kv.k.dtype == DType::kF8E4M3;
  IB_ASSERT(
      qkv.dtype == x.dtype && (kv.k.dtype == x.dtype || cache_fp8) && kv.v.dtype == kv.k.dtype,
      "launch_gemv_rope_cache: qkv has x's dtype, the cache x's dtype or fp8_e4m3");
  GemvRopeCache rc;
  rc.positions = positions.as<int32_t>();
  rc.slot_mapping = slot_mapping.as<int32_t>();
  rc.inv_freq = inv_freq.as<float>();
  rc.k_cache = kv.k.data;
  rc.v_cache = kv.v.data;
  rc.num_heads = shape.num_heads;
  rc.num_kv_heads = shape.num_kv_heads;
  rc.head_dim = shape.head_dim;
  rc.block_size = kv.block_size;
  rc.cache_fp8 = cache_fp8;
  rc.k_scale = kv.k_scale;
  rc.v_scale = kv.v_scale;
  dispatch(x, w, [&]<typename T, int kW>() {
    launch_fused_typed<T, kGemvRopeCache, true, kW>(x, w, gain, bias, qkv, eps, stream, pdl, act,
                                                    lora, rc);
  });
}

bool gemv_rope_cache_supported(const Tensor& x, const WeightRef& w, const AttentionShape& shape) {
  return gemv_fused_supported(x, w, GemvFusion::kAccumulate) && shape.head_dim % kGemvRows == 0 &&
         w.data.dim(0) == int64_t{shape.num_heads + 2 * shape.num_kv_heads} * shape.head_dim;
}

bool gemv_fused_shapes_fit(const AttentionShape& shape, int64_t hidden_size,
                           int64_t intermediate_size) {
  const int64_t q = int64_t{shape.num_heads} * shape.head_dim;
  return hidden_size % kGemvStepK == 0 && intermediate_size % kGemvStepK == 0 &&
         q % kGemvStepK == 0 && shape.head_dim % kGemvRows == 0;
}

// The K step of w's kernel variant.
int64_t step_k(const WeightRef& w) {
  return is_4bit(w.format) ? kGemvInt4StepK : kGemvStepK;
}

// The weight's storage matches x (dense) or is a quantized format's bytes with f32 row scales;
// W4A16 codes whose groups hold whole 128-k steps without an input permutation, or NF4 in
// blocks of 64 (act-order and smaller groups take the dequantizing path: the CUDA backend's
// matmul, and its fused ops' fallback).
bool gemv_weight_ok(const Tensor& x, const WeightRef& w) {
  // (The 4-bit kernels index the group parameters with 32-bit offsets.)
  const bool offsets_fit = w.scales.numel() <= INT32_MAX;
  if (w.format == WeightFormat::kInt4W4A16) {
    return w.quantized_layout_ok() && w.group_size % kGemvInt4StepK == 0 && w.input_perm.empty() &&
           offsets_fit;
  }
  if (w.format == WeightFormat::kNf4) {
    return w.quantized_layout_ok() && w.group_size == 64 && offsets_fit;
  }
  if (w.format == WeightFormat::kGguf) return false;  // its own kernels (gguf.cu)
  if (is_quantized(w.format)) return w.quantized_layout_ok();
  return w.data.dtype == x.dtype;
}

bool gemv_fused_supported(const Tensor& x, const WeightRef& w, GemvFusion fusion) {
  const bool half_type = x.dtype == DType::kBF16 || x.dtype == DType::kF16;
  const bool rows_ok = fusion != GemvFusion::kRmsSwiGlu || w.data.dim(0) % 2 == 0;
  return half_type && gemv_weight_ok(x, w) && x.rows() >= 1 && x.rows() <= kGemvFusedMaxM &&
         w.cols() % step_k(w) == 0 && x.row_size() == w.cols() && aligned16(x.data) &&
         aligned16(w.data.data) && rows_ok;
}

void launch_gemv_fused(const Tensor& x, const Tensor* gain, const WeightRef& w, const Tensor* bias,
                       Tensor out, GemvFusion fusion, float eps, cudaStream_t stream, bool pdl,
                       const GemvQuantAct* act, const GemvLora* lora) {
  IB_ASSERT(gemv_fused_supported(x, w, fusion), "launch_gemv_fused: unsupported operands");
  IB_ASSERT(out.dtype == x.dtype, "launch_gemv_fused: out must have x's dtype");
  IB_ASSERT(is_quantized(w.format) || gain == nullptr,
            "launch_gemv_fused: a dense weight has its gain folded");
  if (gain)
    IB_ASSERT(gain->dtype == x.dtype && gain->numel() == x.row_size(),
              "launch_gemv_fused: gain (K) of x's dtype");
  if (bias) IB_ASSERT(bias->dtype == x.dtype, "launch_gemv_fused: bias dtype must match x");
  dispatch(x, w, [&]<typename T, int kW>() {
    launch_fused<T, kW>(x, w, gain, bias, out, fusion, eps, stream, pdl, act, lora);
  });
}

int64_t gemv_max_m(WeightFormat format) {
  // W8A8 takes up to 8 tokens (one n-tile; cuBLASLt's E4M3 GEMM wins from 16, bench/NOTES.md);
  // W4A16 up to 16 (two n-tiles: its x registers).
  if (is_4bit(format)) return 16;
  return quantizes_activations(format) ? kGemvFusedMaxM : kGemvMaxM;
}

bool gemv_supported(const Tensor& x, const WeightRef& w, const Tensor& out) {
  const bool half_type = x.dtype == DType::kBF16 || x.dtype == DType::kF16;
  // Quantized weights write x's dtype only (they never produce the fp32 logits: lm_head stays
  // dense).
  const bool out_ok = out.dtype == x.dtype || (!is_quantized(w.format) && out.dtype == DType::kF32);
  return half_type && gemv_weight_ok(x, w) && out_ok && x.rows() >= 1 &&
         x.rows() <= gemv_max_m(w.format) && w.cols() % step_k(w) == 0 &&
         x.row_size() == w.cols() && aligned16(x.data) && aligned16(w.data.data);
}

void launch_gemv(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out,
                 cudaStream_t stream, bool pdl, const GemvQuantAct* act) {
  IB_ASSERT(gemv_supported(x, w, out), "launch_gemv: operands the GEMV kernel cannot run");
  if (bias) IB_ASSERT(bias->dtype == x.dtype, "launch_gemv: bias dtype must match x");
  dispatch(x, w, [&]<typename T, int kW>() {
    if constexpr (kW == kGemvDense) {
      if (out.dtype == DType::kF32)
        return launch_typed<T, float, kW>(x, w, bias, out, stream, pdl, nullptr);
    }
    launch_typed<T, T, kW>(x, w, bias, out, stream, pdl, act);
  });
}

}  // namespace ib::cuda
