// The tensor-core GEMM tile shared by the grouped expert GEMM (moe_gemm.cu) and the weight-only
// quantized GEMM (quant_gemm.cu): a block of 8 warps computes a kBM x kBN tile of x @ w^T over a
// range of K in stages of kBK through a kStages-deep cp.async ring, ldmatrix + m16n8k16 MMAs with
// fp32 accumulation. The caller's loaders say where A's rows and B's rows come from; a quantized B
// arrives as codes and is turned into the activation dtype in one shared B tile per stage.
#pragma once

#include <cstdint>

#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/mma.cuh"

namespace ib::cuda::gemm_tile {

constexpr int kBM = 64;   // A rows (tokens, pairs) per tile
constexpr int kBN = 128;  // weight rows (output features) per tile
constexpr int kBK = 32;   // K per pipeline stage
constexpr int kStages = 3;
constexpr int kThreads = 256;    // 8 warps: 2 (M) x 4 (N), 32 x 32 outputs each
constexpr int kPitch = kBK + 8;  // 80-byte smem rows: ldmatrix's 8 rows land in distinct banks
constexpr int kAStage = kBM * kPitch, kBStage = kBN * kPitch;  // 16-bit elements
constexpr int kSmemBytes = kStages * (kAStage + kBStage) * 2;  // 46,080: a dense B's stages
// A quantized B: A's stages, one converted B tile, then each stage's codes (at most 32 bytes a
// weight row: 8-bit codes; 4-bit ones take 16).
constexpr int kCodesOffsetBytes = (kStages * kAStage + kBStage) * 2;
constexpr int kMaxCodeBytesPerRow = kBK;
static_assert(kCodesOffsetBytes + kStages * kBN * kMaxCodeBytesPerRow <= kSmemBytes,
              "a quantized B's codes fit the dense stages' memory");

using Acc = float[2][4][4];  // a warp's 32 x 32 outputs: [mi][ni][fragment element]

// The accumulators' coordinates in the tile: acc[mi][ni][2 h + e] is row warp_m * 32 + mi * 16 +
// lane / 4 + 8 h, column warp_n * 32 + ni * 8 + (lane % 4) * 2 + e. f(row, col, v0, v1) once per
// pair of adjacent columns.
template <typename F>
__device__ __forceinline__ void for_each_pair(const Acc& acc, F&& f) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int warp_m = warp >> 2, warp_n = warp & 3, rg = lane >> 2, cq = (lane & 3) * 2;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
        f(warp_m * 32 + mi * 16 + rg + 8 * h, warp_n * 32 + ni * 8 + cq, acc[mi][ni][2 * h],
          acc[mi][ni][2 * h + 1]);
}

// One stage's MMAs: at (kBM, kPitch) and bt (kBN, kPitch) row-major in shared memory.
template <typename T>
__device__ __forceinline__ void mma_stage(const T* at, const T* bt, Acc& acc) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int warp_m = warp >> 2, warp_n = warp & 3;
#pragma unroll
  for (int ks = 0; ks < kBK / 16; ++ks) {
    uint32_t af[2][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
      ldmatrix_x4(af[mi],
                  at + (warp_m * 32 + mi * 16 + (lane & 15)) * kPitch + ks * 16 + (lane >> 4) * 8);
#pragma unroll
    for (int np = 0; np < 2; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, bt + (warp_n * 32 + np * 16 + (lane & 7) + ((lane >> 4) << 3)) * kPitch +
                         ks * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        mma_16816<T>(acc[mi][2 * np], af[mi][0], af[mi][1], af[mi][2], af[mi][3], b[0], b[1]);
        mma_16816<T>(acc[mi][2 * np + 1], af[mi][0], af[mi][1], af[mi][2], af[mi][3], b[2], b[3]);
      }
    }
  }
}

// Thread tid's part of stage kt of 64 rows of 16-bit elements (A's, or half a dense B's): 16 bytes
// (8 k) at chunk tid % 4 of row tid / 4 of the slot, whose source row starts at row_src (ok
// false: a row past M or N, or padding), zero past K (K a multiple of 8: a chunk is all in or
// all out).
template <typename T>
__device__ __forceinline__ void load_rows_chunk(T* slot, const T* row_src, bool ok, int kt,
                                                int64_t k_dim) {
  const int chunk = static_cast<int>(threadIdx.x) & 3, row = static_cast<int>(threadIdx.x) >> 2;
  const int64_t col = int64_t{kt} * kBK + chunk * 8;
  const bool in_k = col < k_dim;
  cp_async16(slot + row * kPitch + chunk * 8, row_src + (in_k ? col : 0), ok && in_k);
}

// A K loop's start: acc zeroed and the first kSlots - 1 stages' loads issued, one commit group
// each (empty past kt_end). Returns the loop's stage count.
template <int kSlots, typename Load>
__device__ __forceinline__ int start_pipeline(int kt_begin, int kt_end, Load& load_stage,
                                              Acc& acc) {
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
      acc[mi][ni][0] = acc[mi][ni][1] = acc[mi][ni][2] = acc[mi][ni][3] = 0.0f;
  const int count = kt_end - kt_begin;
#pragma unroll
  for (int s = 0; s < kSlots - 1; ++s) {
    if (s < count) load_stage(s, kt_begin + s);
    cp_async_commit();
  }
  return count;
}

// The K loop over stages [kt_begin, kt_end): load_stage(slot, kt) issues stage kt's cp.async
// copies into ring slot `slot` (A at as + slot * kAStage; a dense B at bs + slot * kBStage, a
// quantized B's codes wherever the loader keeps them); kConvert: convert_stage(slot, kt) turns
// the slot's codes into the one B tile at bs (every warp is past its previous MMAs when it runs,
// and the MMAs wait for it). One commit group per iteration, empty ones included, so
// wait_group<kStages - 2> always means "stage i has landed". acc starts at zero.
template <typename T, bool kConvert, typename Load, typename Convert>
__device__ __forceinline__ void mainloop(int kt_begin, int kt_end, const T* as, const T* bs,
                                         Load&& load_stage, Convert&& convert_stage, Acc& acc) {
  const int count = start_pipeline<kStages>(kt_begin, kt_end, load_stage, acc);
  for (int i = 0; i < count; ++i) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage i is in; every warp is done with the slot refilled next
    const int next = i + kStages - 1;
    if (next < count) load_stage(next % kStages, kt_begin + next);
    cp_async_commit();
    const T* bt = bs;
    if constexpr (kConvert) {
      convert_stage(i % kStages, kt_begin + i);
      __syncthreads();
    } else {
      bt = bs + (i % kStages) * kBStage;
    }
    mma_stage<T>(as + (i % kStages) * kAStage, bt, acc);
  }
  cp_async_wait<0>();
}

// The weight-only GEMM's pipeline (quant_gemm.cu): the conversion runs a stage ahead of the
// MMAs, into one of two B tiles, so that each stage takes one barrier instead of two and a warp's
// conversion of stage i + 1 (ALU) issues behind its MMAs of stage i (tensor pipe) instead of
// waiting for every warp's. kAheadStages slots of A and codes: a stage's loads are issued three
// iterations before its MMAs, two before its conversion. Dynamic shared memory (57,344 bytes):
// A's stages, the two B tiles, then the codes' stages (kMaxCodeBytesPerRow a row).
constexpr int kAheadStages = 4;
constexpr int kAheadBOffsetBytes = kAheadStages * kAStage * 2;
constexpr int kAheadCodesOffsetBytes = kAheadBOffsetBytes + 2 * kBStage * 2;
constexpr int kAheadSmemBytes = kAheadCodesOffsetBytes + kAheadStages * kBN * kMaxCodeBytesPerRow;

// load_stage(slot, kt) as mainloop's; convert_stage(slot, kt, tile) turns the slot's codes into
// the B tile `tile` (bs or bs + kBStage). acc starts at zero.
template <typename T, typename Load, typename Convert>
__device__ __forceinline__ void mainloop_convert_ahead(int kt_begin, int kt_end, const T* as, T* bs,
                                                       Load&& load_stage, Convert&& convert_stage,
                                                       Acc& acc) {
  const int count = start_pipeline<kAheadStages>(kt_begin, kt_end, load_stage, acc);
  cp_async_wait<kAheadStages - 2>();  // stage 0 has landed (this thread's copies)
  __syncthreads();                    // ... and every thread's
  if (count > 0) convert_stage(0, kt_begin, bs);
  for (int i = 0; i < count; ++i) {
    // Groups committed: stages 0 .. i + kAheadStages - 2; all but the last are in, so stage
    // i + 1's codes have landed.
    cp_async_wait<kAheadStages - 3>();
    // Stage i's B tile is converted and stage i + 1's codes are in, for every thread; every
    // warp is past stage i - 1's MMAs, so its slot and the other B tile are free.
    __syncthreads();
    const int next = i + kAheadStages - 1;
    if (next < count) load_stage(next % kAheadStages, kt_begin + next);
    cp_async_commit();
    mma_stage<T>(as + (i % kAheadStages) * kAStage, bs + (i & 1) * kBStage, acc);
    if (i + 1 < count) {
      convert_stage((i + 1) % kAheadStages, kt_begin + i + 1, bs + ((i + 1) & 1) * kBStage);
    }
  }
  cp_async_wait<0>();
}

// A quantized B's conversion: thread tid turns 16 consecutive k of B tile row tid / 2 (half
// tid % 2 of the stage) into T. These write them, 16 values packed in pairs, to that row.
template <typename T>
__device__ __forceinline__ void store_b16(T* bs, const uint32_t (&v)[8]) {
  const int row = static_cast<int>(threadIdx.x) >> 1, half = static_cast<int>(threadIdx.x) & 1;
  auto* dst = reinterpret_cast<uint4*>(bs + row * kPitch + half * 16);
  dst[0] = make_uint4(v[0], v[1], v[2], v[3]);
  dst[1] = make_uint4(v[4], v[5], v[6], v[7]);
}

// A converting thread's group parameters (scale and zero point). Each group's are requested
// when the group before it starts (groups of 128: four stages ahead), so that no stage's
// conversion waits for them, and without a division in the K loop (a 64-bit one is a software
// routine of ~70 instructions; two a stage cost more than the stage's conversion).
// advance() is called once a stage, in order from start()'s kt_begin.
struct StageGroups {
  int per_group;         // stages a group spans: group_size / kBK (group_size a multiple of kBK)
  int64_t next = 0;      // the group whose parameters are pending
  int until_switch = 0;  // advances left in the current group
  int first_length = 0;  // the stages of kt_begin's group from kt_begin on
  float scale = 0.0f, zero = 0.0f, pending_scale = 0.0f, pending_zero = 0.0f;

  // Before the K loop: the first stage's group requested.
  template <typename Load>
  __device__ __forceinline__ void start(int kt_begin, Load&& load) {
    next = kt_begin / per_group;
    first_length = per_group - (kt_begin - static_cast<int>(next) * per_group);
    until_switch = 0;
    load(next, pending_scale, pending_zero);
  }
  // At stage kt: where a new group starts, its parameters become current and the next group's
  // are requested (if a stage before kt_end is in it).
  template <typename Load>
  __device__ __forceinline__ void advance(int kt, int kt_end, Load&& load) {
    if (until_switch == 0) {
      scale = pending_scale;
      zero = pending_zero;
      until_switch = first_length;
      first_length = per_group;  // every later group is whole
      ++next;
      if (kt + until_switch < kt_end) load(next, pending_scale, pending_zero);
    }
    --until_switch;
  }
};

// 16 4-bit codes of kInt4W4A16 (8 bytes, k = 2j in the low nibble of byte j): (q - z) * s, each
// rounded to T once, as the dequantization (quant_int4.cu) and the CPU define it. ok false: zeros.
// Without I2F (int4_code_value: 16 I2F a thread and stage would take ~256 cycles a block stage,
// against ~128-190 for its MMAs); a code to bits 16-19 is one shift and one LOP3.
template <typename T>
__device__ __forceinline__ void convert_int4(uint2 q, float scale, float zero, bool ok,
                                             uint32_t (&v)[8]) {
  const float offset = -(128.0f + zero) * scale;
  const auto value = [&](uint32_t word, int nibble) {  // nibble 0-7 of word, as 128 + q
    const int shift = 4 * nibble - 16;
    return int4_code_value((shift >= 0 ? word >> shift : word << -shift) & 0xF0000u, scale, offset);
  };
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t word = j < 4 ? q.x : q.y;
    v[j] = ok ? pack2<T>(value(word, 2 * (j & 3)), value(word, 2 * (j & 3) + 1)) : 0u;
  }
}

// 16 NF4 codes (8 bytes, k = 2j in the high nibble of byte j): levels[q] * absmax, rounded once.
template <typename T>
__device__ __forceinline__ void convert_nf4(uint2 q, const float* levels, float absmax, bool ok,
                                            uint32_t (&v)[8]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t byte = ((j < 4 ? q.x : q.y) >> (8 * (j & 3))) & 0xffu;
    v[j] = ok ? pack2<T>(levels[byte >> 4] * absmax, levels[byte & 15u] * absmax) : 0u;
  }
}

// 16 int8 codes (16 bytes): the integers themselves, exact in bf16 and fp16 (the row's scale
// multiplies the accumulator instead), without I2F (int8_byte_as_float).
template <typename T>
__device__ __forceinline__ void convert_int8(uint4 q, uint32_t (&v)[8]) {
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t w = words[j / 2];
    v[j] = pack2<T>(int8_byte_as_float(w, 2 * (j & 1)), int8_byte_as_float(w, 2 * (j & 1) + 1));
  }
}

}  // namespace ib::cuda::gemm_tile
