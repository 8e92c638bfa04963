// The decode GEMM kernel template: out (M, N) = x (M, K) @ w (N, K)^T for small M, bound by
// streaming w once.
//
// Each block owns 16 output features (rows of w), a row tile, and splits K across its warps. A
// launch of fewer blocks than tiles (IB_GEMV_PERSIST, the quantized formats) loops over tiles,
// each block loading its next tile's first weights before the current tile's reduction. A warp step
// covers 64 k: lane (r = lane / 4, q = lane % 4) loads 16 contiguous elements of w rows r and
// r + 8 and of x row r (two 16-byte loads each) and feeds them to four m16n8k16 tensor-core MMAs
// with w as the A operand (16 rows) and x^T as B (8 tokens per n-tile). The k order inside an
// MMA is permuted identically for A and B, so each lane's contiguous loads map straight onto
// the fragment registers without shuffles. A warp keeps kUnroll steps of loads in flight; with
// kAdjacent those steps are consecutive in k (longer contiguous runs per row), otherwise they
// are kWarps steps apart. fp32 accumulation; the warps' partial sums are reduced through shared
// memory and the bias is added on the way out.
//
// Fused decode variants (kRms, kEpilogue): with kRms the kernel also sums the squares of the x
// values it loads (each element of x is loaded exactly once per block) and scales each token's
// results by 1 / rms(x) on the way out, which is rms_norm(x) @ w^T when the norm's gain has been
// folded into w's columns. The epilogue then stores, adds into out (a residual), or, for
// kSwiGlu, computes silu(gate) * up: the block's 16 weight rows are then 8 gate rows (w rows
// j0..j0+7) and the 8 matching up rows (w rows F + j0 ..), so both halves of a feature meet in
// one block and the (M, 2F) intermediate is never written.
//
// FP8 weights (kFp8, W8A8 as backend/weight.h defines it): w is E4M3 bytes with a scale per row,
// so a warp step's 16 bytes per lane and row are one load, fed to m16n8k32 E4M3 MMAs (a lane's
// four words map onto a0..a3 / b0, b1 as the 16-bit words do). x comes already quantized
// (quant.cu: once per token, with the norm's gain applied and 1 / rms in the token's scale) and
// is loaded 16 bytes per lane and step like w; the result is scaled by the token's and the row's
// scales on the way out. (Converting x in every block and step instead streamed at 2.2-2.5 TB/s
// against this form's up to 3.4: bench/NOTES.md, FP8 runs 7 and 8.)
//
// INT8 weights (kGemvInt8A8, W8A8): as FP8, with m16n8k32 s8 MMAs summing exactly in int32.
// INT8 W8A16 (kGemvInt8): the weight row's 16 bytes per lane and step are converted to 16
// activation-dtype values (exactly: every int8 is a bf16/f16) and fed with x, unquantized, to the
// dense variant's m16n8k16 MMAs; the row's scale multiplies the sum on the way out. The norm of
// a fused op is applied to x before the kernel (launch code), so kRms is never set with it.
// INT4 W4A16 (kGemvInt4, AWQ / GPTQ repacked) and NF4 (kGemvNf4): 128 k per step, a lane's 16
// bytes per row are 32 codes; gemv_int4.cuh. Like W8A16, x unquantized and normalised before the
// kernel (applying the norm in the kernel measured slower: bench/NOTES.md, 4-bit run5).
//
// The parameters and per-step pieces are in gemv_steps.cuh, the LoRA variant's in
// gemv_lora_tile.cuh, the epilogue in gemv_epilogue.cuh.
#pragma once

#include <type_traits>

#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/flag_sync.cuh"
#include "backend/cuda/detail/gemv_epilogue.cuh"
#include "backend/cuda/detail/gemv_lora_tile.cuh"
#include "backend/cuda/detail/gemv_steps.cuh"
#include "backend/cuda/detail/norm_row.cuh"
#include "backend/cuda/detail/pdl.cuh"
#include "backend/cuda/detail/quant_row.cuh"

namespace ib::cuda {

// x (M, K), w (N, K), bias (N) or null, out (M, N); K % 64 == 0; M <= 8 * NT.
// grid: ceil(N / 16) blocks of kWarps * 32 threads. Under programmatic dependent launch the
// interleaved variant issues its first weight loads before waiting for the previous kernel
// (weights are constant; x and out are not touched before the wait).
// kEpilogue = kGemvSwiGlu: n = 2F weight rows, grid ceil(F / 8) blocks, out (M, F).
// kEpilogue = kGemvRopeCache: n = (Hq + 2 Hkv) * head_dim, grid n / 16 blocks, head_dim / 16 per
// head; a q or k head's block owns the 8 rotate-half pairs (i, i + head_dim / 2) for i in
// [8 j, 8 j + 8), so each pair meets in one block; a v head's block owns 16 consecutive rows.
// kRms: eps is the norm's epsilon (unused otherwise).
// lora: the LoRA update the fused epilogues add (GemvLora; slot_ids null: none).
// kW = kGemvFp8 / kGemvInt8A8: w points at E4M3 / int8 bytes, fp8.w_scales at the row scales;
// x_raw at x already quantized (bytes (M, K), fp8.x_scales per token, the norm and its gain
// applied by the quantize kernel), so kRms only says the scales carry 1 / rms.
// kW = kGemvInt8: w int8 with fp8.w_scales, x as for dense weights; kRms false.
// kMinBlocks: the blocks per SM the registers must allow (__launch_bounds__); 1 leaves the
// dense variants' register use to the compiler (92-118 registers: 2 blocks of 8 warps per SM).
// kRing (the quantized formats, IB_GEMV_RING; dense weights, IB_GEMV_DENSE_RING): a warp's weight
// loads go through a ring of kRing steps in shared memory by cp.async (each lane copies and reads
// back only its own 16 bytes per row, load and step), so kRing steps stay in flight while the
// warp computes and hold no registers; 0: the register double-group of kUnroll steps. The steps
// and their order are the same in both, so are the results, bit for bit. The dense ring (2 loads
// per row and step) needs gemv_ring_smem_bytes of dynamic shared memory.
// kXShared (the quantized formats through the ring, one token): x in each block's dynamic shared
// memory (gemv_x_shared_bytes), read by every step from there instead of from global memory
// right before its MMAs. Once its first weights are in flight and the previous kernel is done,
// the block copies the token's x in (copy16_to_shared: every thread's loads issued together,
// plain loads, so the ring's cp.async groups stay in flight). IB_GEMV_STAGE_X: W8A16 and the
// 4-bit formats copy x, W8A8 the codes the quantize kernel wrote (GemvQuant's x_scales set).
// IB_GEMV_FUSE_QUANT (W8A8, x_scales null): no quantize kernel; the block copies x in and
// quantizes it into k bytes of codes there (quantize_row_in_block, the quantize kernel's
// arithmetic and order, so the same codes and scale; GemvQuant's q_gain, copied in before the
// wait, and q_fixed). IB_GEMV_STAGE_NORM (W8A16, 4-bit; GemvQuant's q_gain set): no norm
// kernel; the block copies x itself in and normalises it there (norm_row.cuh, the norm kernel's
// arithmetic and order). The same steps in the same order: the same results.
template <typename T, typename TOut, int NT, int kWarps, int kUnroll, bool kAdjacent,
          int kEpilogue = kGemvStore, bool kRms = false, int kW = kGemvDense,
          int kMinBlocks = kW == kGemvDense ? 1 : 3, bool kLora = false, bool kChain = false,
          int kRing = 0, bool kXShared = false>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    gemv_kernel(const void* __restrict__ x_raw, const void* __restrict__ w_raw,
                const T* __restrict__ bias, TOut* __restrict__ out, int m, int n, int k, float eps,
                GemvRopeCache rc, GemvQuant fp8 = {}, GemvLora lora = {}) {
  constexpr bool kQuant = kW != kGemvDense;                  // 1-byte weights, row scales
  constexpr bool kXq = kW == kGemvFp8 || kW == kGemvInt8A8;  // x already quantized
  constexpr bool kFp8 = kW == kGemvFp8;
  constexpr bool kNf4 = kW == kGemvNf4;
  constexpr bool kInt4 = kW == kGemvInt4 || kNf4;  // 4-bit: the W4A16 step structure
  constexpr bool kRowScales = kQuant && !kInt4;    // one f32 scale per row, applied on the way out
  static_assert(!kQuant || !kAdjacent, "the quantized variants stream interleaved steps");
  static_assert(kRing == 0 || (!kAdjacent && !kLora), "the ring streams interleaved steps");
  static_assert(!(kRms && (kW == kGemvInt8 || kInt4)),
                "W8A16 and the 4-bit formats take x normalised before the kernel");
  static_assert(!kLora || (NT == 1 && kEpilogue != kGemvStore), "LoRA: the fused decode GEMVs");
  static_assert(!kChain || (kLora && kEpilogue != kGemvRopeCache),
                "chained shrinks: the LoRA GEMVs whose output another op reads (SwiGLU, residual)");
  static_assert(!kXShared || (kQuant && NT == 1 && kRing > 0 && !kLora),
                "x in shared memory: the quantized formats' ring GEMVs of one token");
  const int tile_begin = static_cast<int>(blockIdx.x), tile_step = static_cast<int>(gridDim.x);
  [[maybe_unused]] GemvLoraSmem<T> lsm{};
  if constexpr (kLora) {
    extern __shared__ __align__(16) unsigned char gemv_lora_smem[];
    __shared__ int lora_slot[8];
    __shared__ float lora_scale[8];
    __shared__ int lora_target[kGemvRows];
    __shared__ float lora_chain[8 * kGemvRows];
    lsm.u = reinterpret_cast<float*>(gemv_lora_smem);
    lsm.b = reinterpret_cast<T*>(gemv_lora_smem + sizeof(float) * 8 * lora.group.count * lora.rank);
    lsm.slot = lora_slot;
    lsm.scale = lora_scale;
    lsm.target = lora_target;
    lsm.chain = lora_chain;
  }
  // kXShared (gemv_x_shared_bytes of dynamic shared memory): W8A8 x's codes (k bytes), then
  // where the block quantizes, x (2k) and the gain (2k, where there is one); else x (2k), then
  // where the block normalises it the gain (2k). The reductions' scratch and W8A8's scale.
  [[maybe_unused]] uint8_t* xs_smem = nullptr;  // what the steps read: the codes, or x
  [[maybe_unused]] uint4* xs_row = nullptr;     // what is copied in: x, or the codes
  [[maybe_unused]] uint4* xs_gain = nullptr;    // quantizing / normalising here: the gain, or null
  [[maybe_unused]] const bool quantize_here = kXq && fp8.x_scales == nullptr;
  // Loads a thread issues together copying x in: 4, and 2 in the 4-bit kernels (ptxas: 4 spill
  // there, at their 85 registers).
  constexpr int kXCopyBatch = kInt4 ? 2 : 4;
  __shared__ float fq_scratch[kXShared ? 32 : 1];
  __shared__ float fq_scale[1];
  if constexpr (kXShared) {
    extern __shared__ __align__(16) unsigned char gemv_xs_smem[];
    xs_smem = gemv_xs_smem;
    xs_row = reinterpret_cast<uint4*>(gemv_xs_smem + (quantize_here ? k : 0));
    if (fp8.q_gain != nullptr)  // W8A8 quantizing here, or x normalised here
      xs_gain = reinterpret_cast<uint4*>(gemv_xs_smem + (quantize_here ? 3 : 2) * k);
  }
  const T* __restrict__ x = static_cast<const T*>(x_raw);
  using TW = std::conditional_t<kQuant, uint8_t, T>;  // a weight element (or byte)
  // 16-byte loads per row and step. Every quantized format reads kGemvStepK bytes of a row per
  // step: 64 k of an 8-bit format, 128 k (kGemvInt4StepK) of a 4-bit one.
  constexpr int kWLoads = kQuant ? 1 : 2;
  const TW* __restrict__ w = static_cast<const TW*>(w_raw);
  __shared__ float partial[kWarps][NT][4][32];  // (warp, n-tile, C register, lane)
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int r = lane >> 2;
  const int q = lane & 3;
  constexpr bool kSwiGlu = kEpilogue == kGemvSwiGlu;
  const int n_out = kSwiGlu ? n / 2 : n;  // output features
  const int tiles = gemv_tile_count(kEpilogue, n);
  // The weight rows of row tile `tile` (one block's 16 rows, or a persistent block's current
  // tile) for lane row lr (tile_rows: this lane's). Rows and tokens past the end read row 0 /
  // token 0: their results are never stored.
  struct TileRows {
    int64_t n0, row_a, row_b;
  };
  const auto tile_rows_of = [&](int tile, int lr) {
    TileRows t;
    if constexpr (kSwiGlu) {
      t.n0 = int64_t{tile} * (kGemvRows / 2);
      t.row_a = t.n0 + lr < n_out ? t.n0 + lr : 0;
      t.row_b = t.n0 + lr < n_out ? n_out + t.n0 + lr : 0;
    } else if constexpr (kEpilogue == kGemvRopeCache) {
      const int per_head = rc.head_dim / kGemvRows;
      const int head = tile / per_head;
      const int j = tile % per_head;
      t.n0 = int64_t{head} * rc.head_dim;  // the head's first row
      if (head < rc.num_heads + rc.num_kv_heads) {
        t.row_a = t.n0 + j * 8 + lr;
        t.row_b = t.row_a + rc.head_dim / 2;
      } else {
        t.row_a = t.n0 + j * kGemvRows + lr;
        t.row_b = t.row_a + 8;
      }
    } else {
      t.n0 = int64_t{tile} * kGemvRows;
      t.row_a = t.n0 + lr < n ? t.n0 + lr : 0;
      t.row_b = t.n0 + lr + 8 < n ? t.n0 + lr + 8 : 0;
    }
    return t;
  };
  const auto tile_rows = [&](int tile) { return tile_rows_of(tile, r); };
  const int64_t w_row = kInt4 ? k / 2 : k;  // elements (bytes) per weight row
  const T* x_ptr[NT];  // kXShared (not W8A8): into xs_smem, the token's x there
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int tok = t * 8 + r;
    const T* row =
        kXShared && !kXq ? reinterpret_cast<const T*>(xs_smem) : x + int64_t{tok < m ? tok : 0} * k;
    x_ptr[t] = row + q * (kInt4 ? 32 : 16);
  }
  [[maybe_unused]] const uint8_t* xq_ptr[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int tok = t * 8 + r;
    xq_ptr[t] = static_cast<const uint8_t*>(x_raw) + int64_t{tok < m ? tok : 0} * k + q * 16;
  }

  const int steps = k / (kInt4 ? kGemvInt4StepK : kGemvStepK);
  // kNf4: each byte value's two levels (high nibble: the even k), filled before the main loop.
  __shared__ float2 nf4_lut[kNf4 ? 256 : 1];
  if constexpr (kNf4) {
    for (int i = threadIdx.x; i < 256; i += kWarps * 32)
      nf4_lut[i] = make_float2(kNf4LevelsDevice[i >> 4], kNf4LevelsDevice[i & 15]);
    __syncthreads();
  }
  __shared__ float w_scale[kQuant ? kGemvRows : 1];
  __shared__ int w_row_sum[kW == kGemvInt8A8 ? kGemvRows : 1];
  __shared__ float inv_rms[kRms ? NT * 8 : 1];
  __shared__ float sq_partial[kRms ? kWarps : 1][kRms ? NT * 8 : 1];
  // The interleaved variants' weights in flight. A persistent block (fewer blocks than tiles)
  // loads its next tile's first group once the current tile's steps are done, so those loads
  // are in flight through the reduction and the epilogue (`preloaded`).
  [[maybe_unused]] uint4 wa[kUnroll][kWLoads], wb[kUnroll][kWLoads];
  [[maybe_unused]] Int4Group grp[kUnroll];  // kInt4: each step's group parameters
  // kRing: (slot, warp, row a / b, load, lane) 16 bytes each (kWLoads loads per row and step),
  // and each slot's group parameters. The quantized formats' ring (32 KB at 4 steps of 8 warps)
  // is static shared memory; the dense one (64 KB) is the launch's dynamic shared memory
  // (gemv_ring_smem_bytes).
  constexpr bool kStaticRing = kRing > 0 && kQuant;
  __shared__ uint4 ring_static[kStaticRing ? kRing : 1][kStaticRing ? kWarps : 1][2][32];
  [[maybe_unused]] uint4* ring_base = &ring_static[0][0][0][0];
  if constexpr (kRing > 0 && !kQuant) {
    extern __shared__ __align__(16) unsigned char gemv_ring_smem[];
    ring_base = reinterpret_cast<uint4*>(gemv_ring_smem);
  }
  [[maybe_unused]] const auto ring_at = [&](int slot, int row, int load) {
    return ring_base + (((slot * kWarps + warp) * 2 + row) * kWLoads + load) * 32 + lane;
  };
  [[maybe_unused]] Int4Group ring_grp[kRing > 0 ? kRing : 1];
  bool preloaded = false;
  const auto full = [&](int first) { return first + (kUnroll - 1) * kWarps < steps; };
  // The group parameters' rows of a tile (kInt4).
  const auto group_rows = [&](int64_t ra, int64_t rb) {
    return Int4GroupRows{static_cast<int32_t>(ra * fp8.groups),
                         static_cast<int32_t>(rb * fp8.groups)};
  };
  const auto load_group = [&](int step, const Int4GroupRows& g) {
    if constexpr (kNf4) {  // the lane's 32 codes lie in 64-block 2 * step + q / 2
      return load_nf4_absmax(fp8.g_absmax, g, step * 2 + q / 2);
    } else {
      return load_int4_group(fp8.g_scales, fp8.g_zeros, g, fp8.steps_shift, fp8.steps_per_group,
                             step);
    }
  };
  // The first group of loads (steps warp, warp + kWarps, ...) of the tile with rows tr.
  const auto load_first = [&](const TileRows& tr) {
    const TW* pa = w + tr.row_a * w_row + q * 16;
    const TW* pb = w + tr.row_b * w_row + q * 16;
    [[maybe_unused]] const Int4GroupRows gr = group_rows(tr.row_a, tr.row_b);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      gemv_load_w<TW, kWLoads>(pa, pb, int64_t{warp + u * kWarps} * kGemvStepK, wa[u], wb[u]);
      if constexpr (kInt4) grp[u] = load_group(warp + u * kWarps, gr);
    }
  };

  for (int tile = tile_begin; tile < tiles; tile += tile_step) {
    const TileRows tr = tile_rows(tile);
    // kLora: the tile's B rows (after the first weight loads, before the wait), and on the first
    // tile u (by the last warp, right after the wait).
    const auto lora_stage_b = [&] {
      if constexpr (kLora) {
        gemv_lora_stage_b<T>(
            lora, m,
            [&](int j) {
              const TileRows t = tile_rows_of(tile, j % 8);
              return j < 8 ? t.row_a : t.row_b;
            },
            lsm);
        if constexpr (kChain) gemv_lora_prefetch_next<T>(lora, m, tr.n0, n_out);
      }
    };
    // The previous kernel's outputs (x) are whole: griddepcontrol.wait, or with a flagged shrink
    // (GemvLora::sync) its kLoraSyncX, or with a flagged quantize or norm kernel
    // (GemvQuant::sync) its count.
    const auto wait_for_x = [&] {
      if constexpr (kLora) {
        if (lora.sync != nullptr) {
          block_wait_flag(lora.sync + kLoraSyncX, 1u);
          return;
        }
      }
      if constexpr (kQuant) {  // IB_QUANT_SYNC: the quantize or norm kernel's blocks counted
        if (fp8.sync != nullptr) {
          // Once a block (x stays): the last block past its wait sets the words back to 0, so
          // the pointer is dead after the prologue (no register held through the steps).
          if (threadIdx.x == 0 && tile == tile_begin) {
            spin_until_at_least(fp8.sync, fp8.sync_blocks);
            grid_reset_when_last(fp8.sync + 1, fp8.sync, 2);
          }
          __syncthreads();
          return;
        }
      }
      pdl_wait();
    };
    const auto lora_after_wait = [&] {
      if constexpr (kLora) {
        if (tile == tile_begin && warp == kWarps - 1 && lora.sync == nullptr) {
          gemv_lora_copy_u(lora, lsm.u, lane);
          cp_async_commit();
        }
      }
    };
    const int64_t n0 = tr.n0, row_a = tr.row_a, row_b = tr.row_b;
    const TW* wa_ptr = w + row_a * w_row + q * 16;
    const TW* wb_ptr = w + row_b * w_row + q * 16;
    [[maybe_unused]] const Int4GroupRows grows = group_rows(row_a, row_b);

    float acc[NT][4];
    float ss[NT];
    int iacc[NT][4];  // kGemvInt8A8's exact sums
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = ss[t] = 0.0f;
      iacc[t][0] = iacc[t][1] = iacc[t][2] = iacc[t][3] = 0;
    }

    if constexpr (kAdjacent) {
      lora_stage_b();
      wait_for_x();
      pdl_trigger();
      lora_after_wait();
      const int groups = steps / kUnroll;
      for (int g = warp; g < groups; g += kWarps) {
        uint4 ga[kUnroll][2], gb[kUnroll][2], xv[kUnroll][NT][2];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          gemv_load<T, NT>(wa_ptr, wb_ptr, x_ptr, int64_t{g * kUnroll + u} * kGemvStepK, ga[u],
                           gb[u], xv[u]);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          gemv_step<T, NT>(acc, ga[u], gb[u], xv[u]);
          if constexpr (kRms) gemv_sum_squares<T, NT>(ss, xv[u]);
        }
      }
      for (int s = groups * kUnroll + warp; s < steps; s += kWarps) {
        uint4 ga[2], gb[2], xv[NT][2];
        gemv_load<T, NT>(wa_ptr, wb_ptr, x_ptr, int64_t{s} * kGemvStepK, ga, gb, xv);
        gemv_step<T, NT>(acc, ga, gb, xv);
        if constexpr (kRms) gemv_sum_squares<T, NT>(ss, xv);
      }
    } else {
      // The weights of this warp's first group go out before the wait (or were loaded during the
      // previous tile's epilogue); each group's loads of the next group's weights go out right
      // after its MMAs.
      int s = warp;
      // A 4-bit step with its x (loaded here, step by step: all steps' x at once would hold 16
      // registers per step and n-tile).
      const auto int4_step = [&](int step, const uint4& ws, const uint4& wt, const Int4Group& g) {
        uint4 xv[NT][4];
        gemv_load_x_int4<T, NT, kXShared>(x_ptr, int64_t{step} * kGemvInt4StepK, xv);
        if constexpr (kNf4) {
          gemv_step_nf4<T, NT>(acc, ws, wt, xv, g, nf4_lut);
        } else {
          gemv_step_int4<T, NT>(acc, ws, wt, xv, g);
        }
      };
      // One quantized step with its x (the ring's steps and the tail's).
      [[maybe_unused]] const auto quant_step = [&](int step, const uint4& ws, const uint4& wt,
                                                   const Int4Group& g) {
        if constexpr (kXq) {
          uint32_t xq[NT][4];
          if constexpr (kXShared) {  // the lane's 16 codes of step `step` (token 0) in xs_smem
            const uint4 v =
                *reinterpret_cast<const uint4*>(xs_smem + int64_t{step} * kGemvStepK + q * 16);
            xq[0][0] = v.x;
            xq[0][1] = v.y;
            xq[0][2] = v.z;
            xq[0][3] = v.w;
          } else {
            gemv_load_xq<NT>(xq_ptr, int64_t{step} * kGemvStepK, xq);
          }
          if constexpr (kFp8) {
            gemv_step_8bit<NT>(acc, ws, wt, xq);
          } else {
            gemv_step_8bit<NT>(iacc, ws, wt, xq);
          }
        } else if constexpr (kInt4) {
          int4_step(step, ws, wt, g);
        } else if constexpr (kW == kGemvInt8) {
          uint4 xv[NT][2], wsd[2], wtd[2];
          gemv_load_x<T, NT, kXShared>(x_ptr, int64_t{step} * kGemvStepK, xv);
          gemv_widen_int8<T>(ws, wsd);
          gemv_widen_int8<T>(wt, wtd);
          gemv_step<T, NT>(acc, wsd, wtd, xv);
        }
      };
      // One dense step with its x (the ring's; the register path's steps are the same).
      [[maybe_unused]] const auto dense_step = [&](int step, const uint4(&ws)[2],
                                                   const uint4(&wt)[2]) {
        uint4 xv[NT][2];
        gemv_load_x<T, NT>(x_ptr, int64_t{step} * kGemvStepK, xv);
        gemv_step<T, NT>(acc, ws, wt, xv);
        if constexpr (kRms) gemv_sum_squares<T, NT>(ss, xv);
      };
      // kRing: the warp's steps warp + i kWarps, i < ring_steps; step i's copies into slot
      // i % kRing, one commit group per step (empty past the end, so that the groups count steps).
      const int ring_steps = steps > warp ? (steps - warp + kWarps - 1) / kWarps : 0;
      [[maybe_unused]] const auto ring_issue = [&](int i, int slot) {
        if (i < ring_steps) {
          const int64_t kk = int64_t{warp + i * kWarps} * kGemvStepK;
#pragma unroll
          for (int l = 0; l < kWLoads; ++l) {
            cp_async16(ring_at(slot, 0, l), wa_ptr + kk + l * 8, true);
            cp_async16(ring_at(slot, 1, l), wb_ptr + kk + l * 8, true);
          }
          if constexpr (kInt4) ring_grp[slot] = load_group(warp + i * kWarps, grows);
        }
        cp_async_commit();
      };
      if constexpr (kRing > 0) {
#pragma unroll
        for (int u = 0; u < kRing; ++u) ring_issue(u, u);
      } else {
        if (!preloaded && full(s)) load_first(tr);
      }
      lora_stage_b();
      if constexpr (kXShared) {  // the gain (constant) copied in before the wait
        if (tile == tile_begin && xs_gain != nullptr)
          copy16_to_shared<kXCopyBatch>(xs_gain, static_cast<const uint4*>(fp8.q_gain), k / 8);
      }
      if constexpr (kRowScales) {  // the tile's row scales (constant, like the weights)
        if (warp == 0 && q == 0) {
          w_scale[r] = fp8.w_scales[row_a];
          w_scale[r + 8] = fp8.w_scales[row_b];
          if constexpr (kW == kGemvInt8A8) {
            w_row_sum[r] = fp8.zero != 0 ? fp8.row_sums[row_a] : 0;
            w_row_sum[r + 8] = fp8.zero != 0 ? fp8.row_sums[row_b] : 0;
          }
        }
      }
      wait_for_x();
      pdl_trigger();
      lora_after_wait();
      if constexpr (kXShared) {  // x for every tile of the block (x is the same)
        if (tile == tile_begin) {
          // x (2k bytes), or W8A8's codes from the quantize kernel (k).
          const bool codes = kXq && !quantize_here;
          copy16_to_shared<kXCopyBatch>(xs_row, static_cast<const uint4*>(x_raw),
                                        codes ? k / 16 : k / 8);
          __syncthreads();
          if constexpr (kXq) {
            if (quantize_here) {
              using TQ = std::conditional_t<kFp8, uint8_t, int8_t>;
              const float scale = quantize_row_in_block<T, TQ, kRms>(
                  xs_row, xs_gain, k, eps, fp8.q_fixed, reinterpret_cast<TQ*>(xs_smem), fq_scratch);
              if (threadIdx.x == 0) fq_scale[0] = scale;
            }
          } else if (xs_gain != nullptr) {
            rms_norm_row_in_block<T>(xs_row, xs_gain, k, eps, fq_scratch);
          }
        }
      }
      if constexpr (kRing > 0) {
        // Step i waits for its own group (kRing - 1 later ones may be pending), computes, and
        // refills its slot with step i + kRing (after the MMAs that read it).
        for (int i0 = 0; i0 < ring_steps; i0 += kRing) {
#pragma unroll
          for (int u = 0; u < kRing; ++u) {
            const int i = i0 + u;
            if (i < ring_steps) {
              cp_async_wait<kRing - 1>();
              if constexpr (kQuant) {
                const uint4 ws = *ring_at(u, 0, 0), wt = *ring_at(u, 1, 0);
                quant_step(warp + i * kWarps, ws, wt, ring_grp[u]);
              } else {
                const uint4 ws[2] = {*ring_at(u, 0, 0), *ring_at(u, 0, 1)};
                const uint4 wt[2] = {*ring_at(u, 1, 0), *ring_at(u, 1, 1)};
                dense_step(warp + i * kWarps, ws, wt);
              }
              ring_issue(i + kRing, u);
            }
          }
        }
        cp_async_wait<0>();
        s = steps;  // no tail
      }
      for (; kRing == 0 && full(s); s += kUnroll * kWarps) {
        if constexpr (kXq) {
          uint32_t xq[kUnroll][NT][4];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u)
            gemv_load_xq<NT>(xq_ptr, int64_t{s + u * kWarps} * kGemvStepK, xq[u]);
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            if constexpr (kFp8) {
              gemv_step_8bit<NT>(acc, wa[u][0], wb[u][0], xq[u]);
            } else {
              gemv_step_8bit<NT>(iacc, wa[u][0], wb[u][0], xq[u]);
            }
          }
        } else if constexpr (kInt4) {
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) int4_step(s + u * kWarps, wa[u][0], wb[u][0], grp[u]);
        } else if constexpr (kW == kGemvInt8) {
          uint4 xv[kUnroll][NT][2];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u)
            gemv_load_x<T, NT>(x_ptr, int64_t{s + u * kWarps} * kGemvStepK, xv[u]);
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            uint4 wad[2], wbd[2];
            gemv_widen_int8<T>(wa[u][0], wad);
            gemv_widen_int8<T>(wb[u][0], wbd);
            gemv_step<T, NT>(acc, wad, wbd, xv[u]);
          }
        } else {
          uint4 xv[kUnroll][NT][2];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u)
            gemv_load_x<T, NT>(x_ptr, int64_t{s + u * kWarps} * kGemvStepK, xv[u]);
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            gemv_step<T, NT>(acc, wa[u], wb[u], xv[u]);
            if constexpr (kRms) gemv_sum_squares<T, NT>(ss, xv[u]);
          }
        }
        const int next = s + kUnroll * kWarps;
        if (full(next)) {
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            gemv_load_w<TW, kWLoads>(wa_ptr, wb_ptr, int64_t{next + u * kWarps} * kGemvStepK, wa[u],
                                     wb[u]);
            if constexpr (kInt4) grp[u] = load_group(next + u * kWarps, grows);
          }
        }
      }
      for (int s2 = s; s2 < steps; s2 += kWarps) {
        uint4 wt[kWLoads], wu[kWLoads], xv[NT][2];
        gemv_load_w<TW, kWLoads>(wa_ptr, wb_ptr, int64_t{s2} * kGemvStepK, wt, wu);
        if constexpr (kQuant) {
          Int4Group g{};
          if constexpr (kInt4) g = load_group(s2, grows);
          quant_step(s2, wt[0], wu[0], g);
        } else {
          gemv_load_x<T, NT>(x_ptr, int64_t{s2} * kGemvStepK, xv);
          gemv_step<T, NT>(acc, wt, wu, xv);
          if constexpr (kRms) gemv_sum_squares<T, NT>(ss, xv);
        }
      }
      preloaded = kRing == 0 && tile + tile_step < tiles && full(warp);
      if (preloaded) load_first(tile_rows(tile + tile_step));
    }

#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        partial[warp][t][i][lane] = kW == kGemvInt8A8 ? __int_as_float(iacc[t][i]) : acc[t][i];
    // kRms: lanes (r, q = 0..3) summed the squares of token t * 8 + r over this warp's steps
    // (the FP8 variant already reduced them across lanes in its x pass).
    if constexpr (kRms && !kXq) {
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        float v = ss[t];
        v += __shfl_xor_sync(0xffffffffu, v, 1);
        v += __shfl_xor_sync(0xffffffffu, v, 2);
        if (q == 0) sq_partial[warp][t * 8 + r] = v;
      }
    }
    if constexpr (kLora) {
      // A flagged shrink's u, once all its blocks have stored their rows (by then long done: the
      // shrink ran beside this block's weight stream).
      if (lora.sync != nullptr && tile == tile_begin && warp == kWarps - 1) {
        if (lane == 0) spin_until_at_least(lora.sync + kLoraSyncU, lora.u_blocks);
        __syncwarp();
        gemv_lora_copy_u(lora, lsm.u, lane);
        cp_async_commit();
      }
      cp_async_wait<0>();  // u and the B rows landed
    }
    __syncthreads();
    if constexpr (kRms && !kXq) {
      if (threadIdx.x < NT * 8) {
        float total = 0.0f;
#pragma unroll
        for (int wi = 0; wi < kWarps; ++wi) total += sq_partial[wi][threadIdx.x];
        inv_rms[threadIdx.x] = rsqrtf(total / static_cast<float>(k) + eps);
      }
      __syncthreads();
    }
    GemvQuant eq = fp8;
    if constexpr (kXShared && kXq) {
      if (quantize_here) eq.x_scales = fq_scale;  // published by the barrier above
    }
    gemv_epilogue<T, TOut, NT, kWarps, kEpilogue, kRms, kW, kLora, kChain>(
        partial, w_scale, w_row_sum, inv_rms, tile, n0, bias, out, m, n, rc, eq, lora, lsm);
    if constexpr (kChain) {  // the next op's shrink from the outputs just stored
      __syncthreads();
      gemv_lora_chain<T, kSwiGlu ? kGemvRows / 2 : kGemvRows>(lora, lsm, n0, n_out);
    }
    // The next tile rewrites the shared partial sums and scales (and kLora's B rows).
    if (tile + tile_step < tiles) __syncthreads();
  }
  // A flagged LoRA pair's last block to finish sets its words back to 0 (every block's reads of
  // them came before its epilogue's barrier, before this).
  if constexpr (kLora) {
    static_assert(kLoraSyncDone == 2, "the LoRA set's words before its done count");
    if (lora.sync != nullptr && threadIdx.x == 0)
      grid_reset_when_last(lora.sync + kLoraSyncDone, lora.sync, 3);
  }
}

}  // namespace ib::cuda
