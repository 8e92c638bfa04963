// The CUDA engine end to end against the CPU engine and the double-precision reference, on the
// same weights (bf16-rounded for bf16): fp32 logits within 1e-4 relative L2 per row and equal
// greedy tokens; bf16 logits within 2e-2 of the reference on bf16 weights, teacher-forced on the
// tokens the CUDA engine chose. Decode graphs and op-by-op decoding are both checked, with QKV
// bias (Qwen2), a sliding window (Mistral / Phi-3) and Mixtral's experts (bf16 within 5e-2: a
// routing decision may flip where two experts nearly tie), under each programmatic dependent
// launch mode (IB_PDL 0, 1 and the default 3, which is 2 without W8A8 weights) and with the gate/up
// GEMV at both register caps (IB_GEMV_SWIGLU_BLOCKS 0 and the default 3), the q/k/v GEMV at 2 and 3
// blocks an SM (IB_GEMV_QKV_BLOCKS 0, 1 and the default 2), the decode attention's earlier form
// (IB_ATTN_LEAN=0; the lean form is the default), and with a block-sparse pattern of 16-token
// blocks (the prompts cross several; against the reference under the same pattern). Also: the step
// profile, a model too large for the device refused before allocating, and bad device indices.
// Label gpu: skipped visibly without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "backend/backend_factory.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/dtype.h"
#include "engine/detail/engine_cuda_test_support.h"
#include "engine/engine.h"
#include "model/presets.h"

namespace ib {
namespace {

// The shared small CUDA model, with QKV bias (Qwen2) or a sliding window (Mistral / Phi-3), or
// as a Mixtral.
ModelConfig small_config(bool qkv_bias, int sliding_window, bool moe) {
  ModelConfig c = moe ? testing::small_cuda_mixtral("small-cuda-mixtral")
                      : testing::small_cuda_config("small-cuda-test");
  c.attention_bias = qkv_bias;
  c.sliding_window = sliding_window;
  if (qkv_bias) c.family = "qwen2";
  return c;
}

using testing::rel_l2;

struct Case {
  DType dtype;
  bool graphs;
  bool qkv_bias;
  int sliding_window;
  bool moe = false;  // Mixtral: 8 experts, top-2 (the CUDA MoE ops)
  int pdl = -1;      // IB_PDL (programmatic dependent launch: a race changes the logits); -1: unset
  int swiglu_blocks = -1;  // IB_GEMV_SWIGLU_BLOCKS (the gate/up GEMV's register cap); -1: unset
  const char* block_sparse = "";  // --block-sparse-attention; "": dense
  // IB_MOE_ADD_NORM=1 (Mixtral): the experts' combine adds into the residual; in bf16 the decode
  // steps also run the fused decode ops (folded attention gains).
  int moe_add_norm = 0;  // 2: the experts' own combine, then the add + norm kernel
  // IB_ATTN_LEAN=0: the split-KV decode attention's earlier form (the lean one is the default).
  bool attn_lean_off = false;
  int qkv_blocks =
      -1;  // IB_GEMV_QKV_BLOCKS (the q/k/v GEMV's register cap from N tokens); -1: unset
};

constexpr const char* kSparse = "block_size=16,local_blocks=2,vert_stride=3";

class CudaEngineTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaEngineTest, MatchesTheCpuEngineAndTheReference) {
  IB_REQUIRE_CUDA();
  const Case k = GetParam();
  const ModelConfig c = small_config(k.qkv_bias, k.sliding_window, k.moe);
  CpuBackend cpu(2);
  ModelWeights cpu_w = testing::random_weights(c, cpu, 7);
  BackendOptions bo;
  bo.device = "cuda";
  bo.dtype = k.dtype;
  // The case's one switch ("": unset).
  const auto [name, value] =
      k.moe_add_norm != 0
          ? std::pair<std::string, std::string>{"IB_MOE_ADD_NORM", std::to_string(k.moe_add_norm)}
      : k.attn_lean_off ? std::pair<std::string, std::string>{"IB_ATTN_LEAN", "0"}
      : k.qkv_blocks >= 0
          ? std::pair<std::string, std::string>{"IB_GEMV_QKV_BLOCKS", std::to_string(k.qkv_blocks)}
      : k.swiglu_blocks >= 0
          ? std::pair<std::string, std::string>{"IB_GEMV_SWIGLU_BLOCKS",
                                                std::to_string(k.swiglu_blocks)}
          : std::pair<std::string, std::string>{"IB_PDL", k.pdl >= 0 ? std::to_string(k.pdl) : ""};
  auto gpu = testing::create_backend_with_switch(bo, name.c_str(), value);
  ASSERT_TRUE(gpu.ok()) << gpu.error().message;
  auto gpu_w = load_weights(c, WeightOptions{LoadFormat::kDummy, "", 0}, **gpu);
  ASSERT_TRUE(gpu_w.ok()) << gpu_w.error().message;
  testing::share_weights(c, cpu_w, cpu, *gpu_w, **gpu, k.dtype);
  const testing::HostWeights host = testing::copy_weights_to_host(c, cpu_w, cpu);

  EngineConfig config;
  config.capture_logits = true;
  config.max_num_seqs = 8;
  config.max_num_batched_tokens = 64;  // chunks the longest prompt
  config.num_kv_blocks = 64;
  config.use_graphs = k.graphs;
  config.block_sparse_attention = k.block_sparse;
  const BlockSparse sparse = parse_block_sparse(k.block_sparse).value();
  auto cpu_engine = create_engine_with_weights(c, std::move(cpu_w), config, cpu);
  ASSERT_TRUE(cpu_engine.ok()) << cpu_engine.error().message;
  auto gpu_engine = create_engine_with_weights(c, std::move(*gpu_w), config, **gpu);
  ASSERT_TRUE(gpu_engine.ok()) << gpu_engine.error().message;

  Rng rng(11);
  const std::vector<int> lengths = {1, 5, 16, 17, 40, 90};  // 6 requests: buckets 8, 4, 2, 1
  std::map<uint64_t, std::vector<int32_t>> prompts;
  for (size_t i = 0; i < lengths.size(); ++i) {
    prompts[i] = testing::random_prompt(rng, lengths[i], c.vocab_size);
    const int max_tokens = 6 + 3 * static_cast<int>(i);
    for (Engine* e : {cpu_engine->get(), gpu_engine->get()}) {
      ASSERT_TRUE(e->add_request(testing::greedy_request(i, prompts[i], max_tokens)).ok());
    }
  }
  const auto cpu_done = testing::run_to_completion(**cpu_engine);
  const auto gpu_done = testing::run_to_completion(**gpu_engine);
  ASSERT_EQ(gpu_done.size(), prompts.size());

  // bf16 Mixtral: a routing decision may flip where two experts nearly tie (issue 15). Such a
  // step is excused where the reference's router gap at that position is below kNearTie
  // (relative, as tools/routing_verdict.py), one a request; every other step meets tol.
  const double tol = k.dtype == DType::kF32 ? 1e-4 : k.moe ? 5e-2 : 2e-2;
  constexpr double kNearTie = 2e-2;
  double worst_cpu = 0, worst_ref = 0;
  std::string worst_where, per_request;  // the steps' rel. L2 against the reference
  for (const auto& [id, g] : gpu_done) {
    std::vector<int32_t> all = prompts[id];
    all.insert(all.end(), g.tokens.begin(), g.tokens.end());
    std::vector<double> margins;
    const auto ref = testing::reference_logits(c, host, all, {}, {}, sparse, &margins);
    const size_t p = prompts[id].size();
    // Each step's rel. L2 (and the router's gap where it is excused), for the failure message:
    // one step of one request (a routing flip) or every request's (a defect).
    std::string steps;
    int excused = 0;
    for (size_t i = 0; i < g.tokens.size(); ++i) {
      const double r = rel_l2(g.logits[i], ref[p - 1 + i]);
      steps += (i ? " " : "") + std::to_string(r).substr(0, 7);
      if (r > tol && k.dtype != DType::kF32 && margins[p - 1 + i] < kNearTie && excused == 0) {
        ++excused;
        steps += " (near tie: gap " + std::to_string(margins[p - 1 + i]).substr(0, 8) + ")";
        std::printf("near tie excused: request %d step %zu, rel. L2 %.4f, router gap %.2e\n",
                    static_cast<int>(id), i, r, margins[p - 1 + i]);
        continue;
      }
      if (r > worst_ref) {
        worst_ref = r;
        worst_where = "request " + std::to_string(id) + " step " + std::to_string(i);
      }
    }
    per_request += "\n  request " + std::to_string(id) + ": " + steps;
    if (k.dtype == DType::kF32) {
      const auto& cpu_c = cpu_done.at(id);
      EXPECT_EQ(g.tokens, cpu_c.tokens) << "request " << id;
      for (size_t i = 0; i < std::min(g.tokens.size(), cpu_c.tokens.size()); ++i) {
        std::vector<double> want(cpu_c.logits[i].begin(), cpu_c.logits[i].end());
        worst_cpu = std::max(worst_cpu, rel_l2(g.logits[i], want));
      }
    }
  }
  EXPECT_LE(worst_ref, tol) << "worst at " << worst_where << "; each step:" << per_request;
  EXPECT_LE(worst_cpu, 1e-4);
  if (k.moe && k.dtype == DType::kF32 && !k.graphs) {
    // Routing telemetry: the CPU's counts (graph buckets route and count their padded rows too).
    EXPECT_EQ((*gpu_engine)->stats().expert_tokens, (*cpu_engine)->stats().expert_tokens);
  }
  RecordProperty("max_rel_l2", std::to_string(std::max(worst_ref, worst_cpu)));

  const EngineProfile prof = (*gpu_engine)->profile();
  EXPECT_GT(prof.decode.steps, 0);
  EXPECT_EQ(prof.decode.timed_steps, prof.decode.steps);
  EXPECT_GT(prof.decode.bytes, 0);
  EXPECT_GT(prof.copy_ceiling_bytes_per_s, 1e11);
  if (k.graphs) {
    EXPECT_EQ(prof.graph_buckets, (std::vector<int>{1, 2, 4, 8}));
    EXPECT_GT(prof.decode.graph_steps, 0);
  } else {
    EXPECT_EQ(prof.num_graphs, 0);
    EXPECT_EQ(prof.decode.graph_steps, 0);
  }
  gpu_engine->reset();
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, CudaEngineTest,
    ::testing::Values(
        Case{DType::kF32, true, false, 0}, Case{DType::kF32, false, false, 0},
        Case{DType::kF32, true, true, 0}, Case{DType::kF32, true, false, 24},
        Case{DType::kBF16, true, false, 0}, Case{DType::kBF16, false, true, 0},
        Case{DType::kBF16, true, false, 24}, Case{DType::kF32, true, false, 0, true},
        Case{DType::kF32, false, false, 0, true}, Case{DType::kBF16, true, false, 0, true},
        Case{DType::kBF16, false, false, 0, true}, Case{DType::kF32, true, false, 24, false, 0},
        Case{DType::kF32, true, false, 24, false, 1}, Case{DType::kBF16, true, true, 0, false, 0},
        Case{DType::kF32, false, false, 0, true, 0},
        Case{DType::kBF16, true, true, 0, false, -1, 0},
        Case{DType::kF32, true, false, 0, false, -1, -1, kSparse},
        Case{DType::kF32, false, false, 0, false, -1, -1, kSparse},
        Case{DType::kBF16, true, false, 0, false, -1, -1, kSparse},
        Case{DType::kF32, false, false, 0, true, -1, -1, "", 1},
        Case{DType::kBF16, true, false, 0, true, -1, -1, "", 1},
        Case{DType::kBF16, false, false, 0, true, -1, -1, "", 1},
        Case{DType::kBF16, true, false, 0, false, -1, -1, "", 0, true},
        Case{DType::kBF16, true, false, 24, false, -1, -1, "", 0, true},
        Case{DType::kF16, false, true, 0, false, -1, -1, "", 0, true},
        Case{DType::kBF16, true, false, 0, true, -1, -1, "", 0, true},
        Case{DType::kBF16, true, false, 0, false, -1, -1, "", 0, false, 0},
        Case{DType::kBF16, true, false, 0, false, -1, -1, "", 0, false, 1},
        Case{DType::kF16, false, true, 24, false, -1, -1, "", 0, false, 2},
        Case{DType::kF32, false, false, 0, true, -1, -1, "", 2},
        Case{DType::kBF16, true, false, 0, true, -1, -1, "", 2},
        Case{DType::kBF16, false, false, 0, true, -1, -1, "", 2}),
    [](const ::testing::TestParamInfo<Case>& param_info) {
      const Case& k = param_info.param;
      return std::string(dtype_name(k.dtype)) + (k.graphs ? "_graphs" : "_eager") +
             (k.qkv_bias ? "_bias" : "") + (k.sliding_window ? "_window" : "") +
             (k.moe ? "_mixtral" : "") + (k.pdl >= 0 ? "_pdl" + std::to_string(k.pdl) : "") +
             (k.swiglu_blocks >= 0 ? "_swiglu" + std::to_string(k.swiglu_blocks) : "") +
             (*k.block_sparse != 0 ? "_blocksparse" : "") +
             (k.moe_add_norm == 1   ? "_addnorm"
              : k.moe_add_norm == 2 ? "_addnorm2"
                                    : "") +
             (k.attn_lean_off ? "_lean0" : "") +
             (k.qkv_blocks >= 0 ? "_qkv" + std::to_string(k.qkv_blocks) : "");
    });

TEST(CudaEngineSetup, RefusesWeightsLargerThanTheDeviceBeforeAllocating) {
  IB_REQUIRE_CUDA();
  BackendOptions bo;
  bo.device = "cuda";
  bo.dtype = DType::kF32;
  auto gpu = create_backend(bo);
  ASSERT_TRUE(gpu.ok());
  auto big = resolve_model("llama-3-70b");  // 282 GB in fp32
  ASSERT_TRUE(big.ok());
  const int64_t before = (*gpu)->memory().snapshot().allocated_bytes;
  auto engine = create_engine(*big, WeightOptions{}, EngineConfig{}, **gpu);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.error().kind, ErrorKind::kUser);
  EXPECT_NE(engine.error().message.find("GiB free"), std::string::npos) << engine.error().message;
  EXPECT_EQ((*gpu)->memory().snapshot().allocated_bytes, before);
}

TEST(CudaEngineSetup, HeadDimOutsideTheKernelsIsAUserErrorBeforeLoading) {
  IB_REQUIRE_CUDA();
  BackendOptions bo;
  bo.device = "cuda";
  bo.dtype = DType::kBF16;
  auto gpu = create_backend(bo);
  ASSERT_TRUE(gpu.ok());
  auto tiny = resolve_model("tiny-15m");
  ASSERT_TRUE(tiny.ok());
  ASSERT_NE(tiny->head_dim % 32, 0);  // not 64, 96, 128 or 256
  const int64_t before = (*gpu)->memory().snapshot().allocated_bytes;
  WeightOptions w;
  w.format = LoadFormat::kDummy;
  auto engine = create_engine(*tiny, w, EngineConfig{}, **gpu);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.error().kind, ErrorKind::kUser);
  EXPECT_NE(engine.error().message.find("head_dim"), std::string::npos) << engine.error().message;
  EXPECT_EQ((*gpu)->memory().snapshot().allocated_bytes, before);
}

TEST(CudaEngineSetup, BadDeviceIndexIsAUserError) {
  IB_REQUIRE_CUDA();
  BackendOptions bo;
  bo.device = "cuda:" + std::to_string(cuda_device_count());
  bo.dtype = DType::kBF16;
  auto gpu = create_backend(bo);
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.error().kind, ErrorKind::kUser);
  EXPECT_NE(gpu.error().message.find("out of range"), std::string::npos);
}

}  // namespace
}  // namespace ib
