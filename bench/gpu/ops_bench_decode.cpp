// GPU op benchmark section decode_mma (IB_OPS_SECTIONS=decode_mma): the tensor-core decode
// attention (attention_decode_mma.cu) alone over batches of 256 and 1,024 sequences and contexts
// of 64 to 1,024 keys, with a bf16 cache and an E4M3 cache (MMAs in bf16 or in fp16:
// IB_ATTN_E4M3_F16, suffix _f16), a block per (sequence, KV head) or 3 blocks an SM taking them in
// turn (IB_ATTN_MMA_PERSIST=3, suffix _p3), the split-KV kernel beside them (session 37's sweep1
// measured an L2 prefetch and a third E4M3 stage here too, both since removed). With a block per
// item and 3 blocks an SM a launch runs in `waves` of num_sms * 3 blocks, so the time per wave
// against the tiles per block (64 keys each) separates a block's fixed cost (its prologue, first
// load and merge) from its cost per tile.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/cuda/detail/kernels.h"
#include "ops_bench.h"

namespace ib::bench {
namespace {

constexpr int kKeysPerTile = 64;  // attention_decode_mma.cu's kBlockK
constexpr int kBlocksPerSm = 3;   // its shared memory's limit at head_dim 128

struct Variant {
  const char* name;
  DType cache;
  bool mma;          // false: the split-KV kernel through the backend
  bool f16 = false;  // IB_ATTN_E4M3_F16
  int per_sm = 0;    // IB_ATTN_MMA_PERSIST
};

// IB_OPS_DECODE_SHAPES (e.g. "1024x256,256x64"): only those batch x context shapes, for a
// profiler's launch (bench/gpu/decode_ncu.sh); unset, all of them.
bool wanted(int batch, int context) {
  const char* env = std::getenv("IB_OPS_DECODE_SHAPES");
  if (env == nullptr || *env == '\0') return true;
  std::string list(",");
  list.append(env).append(",");
  std::string shape(",");
  shape.append(std::to_string(batch)).append("x").append(std::to_string(context)).append(",");
  return list.find(shape) != std::string::npos;
}

}  // namespace

void bench_decode_mma(BenchContext& ctx) {
  const Variant variants[] = {{"mma_bf16", DType::kBF16, true},
                              {"mma_bf16_p3", DType::kBF16, true, false, 3},
                              {"split_bf16", DType::kBF16, false},
                              {"mma_e4m3", DType::kF8E4M3, true},
                              {"mma_e4m3_f16", DType::kF8E4M3, true, true},
                              {"mma_e4m3_f16_p3", DType::kF8E4M3, true, true, 3},
                              {"split_e4m3", DType::kF8E4M3, false}};
  for (const int batch : {256, 1024}) {
    for (const int context : {64, 128, 192, 256, 384, 512, 1024}) {
      if (!wanted(batch, context)) continue;
      for (const DType cache : {DType::kBF16, DType::kF8E4M3}) {
        Paged p = make_paged(ctx, batch, 1, context, cache);
        const auto n = static_cast<int>(p.metas.size());
        const double tokens = double{1} * batch * context;
        const double bytes =
            tokens * 2.0 * kKvHeads * kHeadDim * static_cast<double>(dtype_size(cache));
        const double blocks = double{1} * batch * kKvHeads;
        const double waves = blocks / (ctx.backend.num_sms() * kBlocksPerSm);
        const int tiles = (context + kKeysPerTile - 1) / kKeysPerTile;
        for (const Variant& v : variants) {
          if (v.cache != cache) continue;
          const auto run = [&](int i) {
            cuda::launch_attention_decode_mma(p.qkv, p.kv, p.metas[static_cast<size_t>(i % n)],
                                              kAttentionShape, p.out, ctx.backend.stream(), v.f16,
                                              v.per_sm * ctx.backend.num_sms());
          };
          const double us = v.mma ? ctx.timer.per_call_ms(run, std::max(2 * n, 8)) * 1e3
                                  : time_attention(ctx, p, cuda::AttentionPath::kSplitKv);
          const std::string shape = std::to_string(batch) + " seq x " + std::to_string(context);
          ctx.report.add({"decode_mma", "attention", shape, v.name, us, bytes,
                          4.0 * tokens * kHeads * kHeadDim});
          std::printf("    %.1f waves of %d-tile blocks: %.2f us a wave\n", waves, tiles,
                      us / std::ceil(waves));
        }
        ctx.release();
      }
    }
  }
}

}  // namespace ib::bench
