// The op benchmark's lora section (issue 16): Llama-3-8B's LoRA decode shrinks at 8 tokens and
// rank 16 alone. o's and down's plain shrinks (IB_LORA_IN_GEMV=1) and their lookahead launches (5:
// o's also computing gate/up's rows, down's the next q/k/v's); one adapter for every token and a
// slot a token; over 32 layers' stacks in turn (rows from DRAM, as in a step) and over one
// layer's (rows from L2); with programmatic dependent launch (each launch's blocks load their rows
// while the one before finishes) and without.
#include <string>
#include <vector>

#include "backend/cuda/detail/lora_kernels.h"
#include "ops_bench.h"

namespace ib::bench {
namespace {

constexpr int64_t kRank = 16, kSlots = 8, kTokens = 8;

struct LoraShape {
  const char* name;
  int64_t k;
  int cur, next;  // targets of the op and of the op after it
};
constexpr LoraShape kShapes[] = {{"o", kHeads* kHeadDim, 1, 2}, {"down", kFfn, 1, 3}};

struct LayerStacks {
  cuda::LoraGroupPtrs cur, m, a2;
};

cuda::LoraGroupPtrs stacks(BenchContext& ctx, int count, int64_t k, float scale) {
  cuda::LoraGroupPtrs g;
  for (int i = 0; i < count; ++i) g.a[i] = ctx.random(DType::kBF16, {kSlots, kRank, k}, scale).data;
  g.count = count;
  return g;
}

}  // namespace

void bench_lora(BenchContext& ctx) {
  cudaStream_t stream = ctx.backend.stream();
  for (const LoraShape& sh : kShapes) {
    const Tensor x = ctx.random(DType::kBF16, {kTokens, sh.k});
    const Tensor x2 = ctx.random(DType::kBF16, {kTokens, kHidden});
    const Tensor u = ctx.allocate(DType::kF32, {kTokens, 3 * kRank});
    const Tensor u_next = ctx.allocate(DType::kF32, {kTokens, 3 * kRank});
    std::vector<LayerStacks> layers;
    for (int l = 0; l < kLayers; ++l) {
      layers.push_back({stacks(ctx, sh.cur, sh.k, 0.02f), stacks(ctx, sh.next, sh.k, 0.02f),
                        stacks(ctx, sh.next, kHidden, 0.02f)});
    }
    const Tensor one_slot = ctx.upload_i32({kTokens}, std::vector<int32_t>(kTokens, 0));
    const Tensor distinct = ctx.upload_i32({kTokens}, {0, 1, 2, 3, 4, 5, 6, 7});
    // Bytes of one slot's rows and the inputs (the rows of a slot a token: 8 slots' rows).
    const double rows_bytes =
        2.0 * kRank * static_cast<double>(sh.cur * sh.k + sh.next * (sh.k + kHidden));
    const double x_bytes = 2.0 * kTokens * static_cast<double>(sh.k + kHidden);
    for (const int n_layers : {kLayers, 1}) {
      for (const bool pdl : {true, false}) {
        for (const bool one : {true, false}) {
          const Tensor& ids = one ? one_slot : distinct;
          const std::string shape = std::string(one ? "8 tok 1 slot" : "8 tok 8 slots") +
                                    (n_layers == 1 ? " L2" : "") + (pdl ? " pdl" : "");
          const double bytes = (one ? 1 : kSlots) * rows_bytes + x_bytes;
          const auto at = [&](int i) -> const LayerStacks& {
            return layers[static_cast<size_t>(i % n_layers)];
          };
          double us = ctx.timer.per_call_ms(
                          [&](int i) {
                            cuda::launch_lora_shrink(x, nullptr, ids, at(i).cur, kRank, kSlots,
                                                     u.as<float>(), stream, pdl);
                          },
                          64) *
                      1e3;
          const auto k = static_cast<double>(sh.k);
          ctx.report.add({"lora", std::string("shrink_") + sh.name, shape, "mode1", us,
                          (one ? 1 : kSlots) * 2.0 * kRank * sh.cur * k + 2.0 * kTokens * k, 0});
          us = ctx.timer.per_call_ms(
                   [&](int i) {
                     cuda::launch_lora_lookahead(x, ids, at(i).cur, at(i).m, x2, at(i).a2, kRank,
                                                 kSlots, u.as<float>(), u_next.as<float>(), stream,
                                                 pdl);
                   },
                   64) *
               1e3;
          ctx.report.add(
              {"lora", std::string("lookahead_") + sh.name, shape, "mode5", us, bytes, 0});
        }
      }
    }
    ctx.release();
  }
}

}  // namespace ib::bench
