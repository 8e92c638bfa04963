// The GPU op benchmark's sections (Llama-3-8B shapes, bf16): each times its ops and adds rows.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cuda/detail/cuda_backend_impl.h"
#include "bench_util.h"

namespace ib::bench {

// Llama-3-8B.
inline constexpr int64_t kHidden = 4096, kFfn = 14336, kVocab = 128256;
inline constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128, kLayers = 32, kBlockSize = 16;

struct BenchContext {
  cuda::CudaBackend& backend;
  GraphTimer& timer;
  Report& report;
  std::vector<Buffer> buffers;  // freed between sections
  // Best per-op times (us) by batch, for the step estimates: times[M]["qkv"] etc.
  std::map<int64_t, std::map<std::string, double>> times;

  // An uninitialised tensor (freed with the section).
  Tensor allocate(DType dtype, std::initializer_list<int64_t> shape);
  Tensor random(DType dtype, std::initializer_list<int64_t> shape, float scale = 1.0f);
  Tensor zeros_i32(std::initializer_list<int64_t> shape);
  Tensor upload_i32(std::initializer_list<int64_t> shape, const std::vector<int32_t>& values);
  void release() { buffers.clear(); }
};

// A layer's four matmuls (N, K).
struct LayerLinear {
  const char* name;
  int64_t n, k;
};
inline constexpr LayerLinear kLayerLinears[] = {
    {"qkv", (kHeads + 2 * kKvHeads) * kHeadDim, kHidden},
    {"o", kHidden, kHeads* kHeadDim},
    {"gate_up", 2 * kFfn, kHidden},
    {"down", kHidden, kFfn}};

// A quantized decode matmul's report fields for m tokens of lin: its shape "MxNxK", the bytes it
// moves (the weight's w_bytes, x in and out in bf16) and its flops.
struct MatmulRow {
  std::string shape;
  double bytes, flops;
};
inline MatmulRow matmul_row(int64_t m, const LayerLinear& lin, double w_bytes) {
  return {std::to_string(m) + "x" + std::to_string(lin.n) + "x" + std::to_string(lin.k),
          w_bytes + static_cast<double>(m * lin.k * 2 + m * lin.n * 2),
          2.0 * static_cast<double>(m * lin.n * lin.k)};
}

// Whether name is one of list's comma-separated items (the IB_OPS_* selections).
bool listed(std::string_view list, std::string_view name);

// A decode or prefill batch over a paged KV cache (ops_bench_other.cpp's make_paged).
struct Paged {
  KvCacheLayer kv;
  std::vector<AttentionMetadata> metas;  // one per cache copy
  Tensor qkv, out;
};
// batch sequences of `context` tokens, the last q_len of each the queries, over a cache of
// cache_dtype (bf16 or E4M3) in enough disjoint copies that replays miss L2.
Paged make_paged(BenchContext& ctx, int batch, int q_len, int context, DType cache_dtype);
// Llama-3-8B's attention (softmax scale 1 / sqrt(128)).
inline const AttentionShape kAttentionShape{kHeads, kKvHeads, kHeadDim, 0.08838834764831845f, 0};
// Microseconds per call of the backend's attention over p on `path`, the cache copies in turn.
double time_attention(BenchContext& ctx, Paged& p, cuda::AttentionPath path);

void warm_up(BenchContext& ctx);
double measure_copy_ceiling(BenchContext& ctx);
void bench_gemm_decode(BenchContext& ctx);
void bench_gemm_prefill(BenchContext& ctx);
void bench_gemm_fp8(BenchContext& ctx);   // ops_bench_fp8.cpp
void bench_gemm_int4(BenchContext& ctx);  // ops_bench_int4.cpp
void bench_attention(BenchContext& ctx);
void bench_decode_mma(BenchContext& ctx);  // ops_bench_decode.cpp
void bench_gemm_algos(BenchContext& ctx);  // ops_bench_gemm_algos.cpp
void bench_lora(BenchContext& ctx);        // ops_bench_lora.cpp
void bench_icache(BenchContext& ctx);      // ops_bench_icache.cpp
void bench_small_ops(BenchContext& ctx);
void bench_sampling(BenchContext& ctx);

}  // namespace ib::bench
