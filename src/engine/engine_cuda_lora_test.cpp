// LoRA adapters on the CUDA engine against the CPU engine, on the same weights and adapters: a
// batch of three adapters (all targets rank 16, q and v rank 4, the MLP rank 8) and the base
// model, served together (decode graphs, or op by op), gives each request the CPU engine's
// logits (fp32 within 1e-4 relative L2 per row and the same greedy tokens; bf16 within 6e-2
// while the tokens agree: see tol below) and the logits it gets alone on the CUDA engine (fp32
// 1e-4, bf16 6e-2: the base matmuls' kernels depend on the batch size), and every adapter moves its
// request's first logits beyond those tolerances (fp32: 5x); with the LoRA kernels in two launches
// per group and in one (IB_LORA_FUSED=1); bf16 decode steps with the updates in the fused decode
// GEMVs (IB_LORA_IN_GEMV=1: a shrink launch before each; 3: chained, each GEMV accumulating the
// next op's shrink, eagerly and in graphs; the adapters' A then take the folded norm gains; 4:
// launched, each GEMV waiting for its shrink by flags, eagerly and in graphs; 5, the default:
// lookahead shrinks, o's and down's also computing gate/up's and the next q/k/v's from the
// lookahead matrices the runner makes as each adapter is loaded, eagerly and in graphs; with
// IB_LORA_ATTN=1 o's computed by the decode attention instead) and on the unfused ops
// (IB_LORA_IN_GEMV=0).
// Label gpu: skipped visibly without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "backend/backend_factory.h"
#include "backend/cpu/cpu_backend.h"
#include "engine/detail/checkpoint_test_support.h"
#include "engine/detail/engine_cuda_test_support.h"
#include "engine/detail/lora_test_support.h"
#include "engine/engine.h"
#include "engine/lora.h"

namespace ib {
namespace {

using testing::rel_l2;

// The largest per-row relative L2 between two completions' logits over the steps whose tokens
// (and so contexts) agree; at least the first step.
double worst_row_error(const testing::Completion& got, const testing::Completion& want) {
  double worst = 0;
  for (size_t i = 0; i < std::min(got.logits.size(), want.logits.size()); ++i) {
    worst = std::max(worst, rel_l2(got.logits[i], want.logits[i]));
    if (i >= got.tokens.size() || i >= want.tokens.size() || got.tokens[i] != want.tokens[i]) {
      break;
    }
  }
  return worst;
}

struct Case {
  DType dtype;
  bool graphs;
  const char* switch_name = "";  // a kernel switch set for the case ("": the defaults)
  const char* switch_value = "";
};

class CudaEngineLora : public ::testing::TestWithParam<Case> {};

TEST_P(CudaEngineLora, MixedBatchMatchesTheCpuEngineAndEachRequestAlone) {
  IB_REQUIRE_CUDA();
  const Case k = GetParam();
  const ModelConfig c = testing::small_cuda_config("small-cuda-lora");
  CpuBackend cpu(2);
  ModelWeights cpu_w = testing::random_weights(c, cpu, 7);
  BackendOptions bo;
  bo.device = "cuda";
  bo.dtype = k.dtype;
  const std::string sw = *k.switch_name ? k.switch_name : "IB_LORA_FUSED";
  auto gpu = testing::create_backend_with_switch(bo, sw.c_str(), k.switch_value);
  ASSERT_TRUE(gpu.ok()) << gpu.error().message;
  ASSERT_NE((*gpu)->lora_ops(), nullptr);
  if (*k.switch_name) {
    ASSERT_EQ((*gpu)->kernel_switches().at(sw).value, k.switch_value);
  }
  auto gpu_w = load_weights(c, WeightOptions{LoadFormat::kDummy, "", 0}, **gpu);
  ASSERT_TRUE(gpu_w.ok()) << gpu_w.error().message;
  testing::share_weights(c, cpu_w, cpu, *gpu_w, **gpu, k.dtype);

  EngineConfig config;
  config.capture_logits = true;
  config.max_num_seqs = 8;
  config.max_num_batched_tokens = 64;  // chunks the longest prompt
  config.num_kv_blocks = 64;
  config.use_graphs = k.graphs;
  config.enable_lora = true;
  config.max_loras = 4;
  config.max_lora_rank = 16;
  auto cpu_engine = create_engine_with_weights(c, std::move(cpu_w), config, cpu);
  ASSERT_TRUE(cpu_engine.ok()) << cpu_engine.error().message;
  auto gpu_engine = create_engine_with_weights(c, std::move(*gpu_w), config, **gpu);
  ASSERT_TRUE(gpu_engine.ok()) << gpu_engine.error().message;

  testing::TempDir tmp;
  const std::vector<std::string> names = {"", "all16", "qv4", "mlp8"};
  const std::vector<std::vector<std::string>> targets = {
      {}, testing::all_targets(), {"q_proj", "v_proj"}, {"gate_proj", "up_proj", "down_proj"}};
  const std::vector<int> ranks = {0, 16, 4, 8};
  for (size_t i = 1; i < names.size(); ++i) {
    // Amplitude 0.5 (the default 0.2 moves the logits less): every adapter well beyond the bf16
    // tolerance.
    const auto p = testing::random_adapter(c, ranks[i], 2.0 * ranks[i], targets[i], 60 + i, 0.5f);
    testing::write_peft_adapter(tmp.path() / names[i], c, p);
    auto adapter = load_lora_adapter((tmp.path() / names[i]).string(), c, 16);
    ASSERT_TRUE(adapter.ok()) << adapter.error().message;
    for (Engine* e : {cpu_engine->get(), gpu_engine->get()}) {
      ASSERT_TRUE(e->add_lora(names[i], *adapter).ok());
    }
  }
  Rng rng(13);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < names.size(); ++i) {
    prompts.push_back(testing::random_prompt(rng, 6 + 25 * static_cast<int>(i), c.vocab_size));
  }
  auto request = [&](uint64_t id, size_t prompt, const std::string& lora) {
    GenerationRequest r = testing::greedy_request(id, prompts[prompt], 8);
    r.lora_name = lora;
    return r;
  };

  // Together: the four requests admitted at once on both engines.
  for (Engine* e : {cpu_engine->get(), gpu_engine->get()}) {
    for (size_t i = 0; i < names.size(); ++i) {
      ASSERT_TRUE(e->add_request(request(i, i, names[i])).ok());
    }
  }
  const auto cpu_mixed = testing::run_to_completion(**cpu_engine);
  const auto gpu_mixed = testing::run_to_completion(**gpu_engine);
  ASSERT_EQ(gpu_mixed.size(), names.size());
  // bf16: the CUDA engine rounds activations and the adapters' A and B to bf16, the CPU engine
  // keeps them in fp32; on this tiny random model the H200 measured up to 4.0e-2 on the adapter
  // rows on the unfused ops (IB_LORA_IN_GEMV=0), and 5.2e-2 on the fused decode path, whose
  // weights and adapters' A carry the norm gains folded in (one more bf16 rounding of each;
  // bench/results/h200/lora/in-gemv), so 6e-2. The accuracy bound that matters is elsewhere: the
  // op checks (CudaLora*, CudaFusedLora*) are 1e-2, and tools/hf_compare_lora.py holds the bf16
  // engine to 1e-2 against transformers + peft in fp32 (7.6e-3 at the fused path).
  const double tol = k.dtype == DType::kF32 ? 1e-4 : 6e-2;
  double worst = 0;
  for (uint64_t i = 0; i < names.size(); ++i) {
    const testing::Completion &g = gpu_mixed.at(i), &cpu_c = cpu_mixed.at(i);
    if (k.dtype == DType::kF32) {
      EXPECT_EQ(g.tokens, cpu_c.tokens) << "request " << i;
    }
    const double e = worst_row_error(g, cpu_c);
    EXPECT_LE(e, tol) << "request " << i << " (" << names[i] << ") against the CPU engine";
    RecordProperty("rel_l2_cpu_" + std::to_string(i), std::to_string(e));
    worst = std::max(worst, e);
  }

  // Alone on the CUDA engine: each request, then the base model on each adapter's prompt.
  for (uint64_t i = 0; i < names.size(); ++i) {
    ASSERT_TRUE((*gpu_engine)->add_request(request(10 + i, i, names[i])).ok());
    const auto alone = testing::run_to_completion(**gpu_engine);
    const testing::Completion& a = alone.at(10 + i);
    if (k.dtype == DType::kF32) {
      EXPECT_EQ(a.tokens, gpu_mixed.at(i).tokens) << "request " << i;
    }
    const double e = worst_row_error(a, gpu_mixed.at(i));
    EXPECT_LE(e, tol) << "request " << i << " (" << names[i] << ") alone against the batch";
    worst = std::max(worst, e);
    if (i == 0) continue;
    ASSERT_TRUE((*gpu_engine)->add_request(request(20 + i, i, "")).ok());
    const auto base = testing::run_to_completion(**gpu_engine);
    const double moved = rel_l2(base.at(20 + i).logits.at(0), a.logits.at(0));
    EXPECT_GT(moved, (k.dtype == DType::kF32 ? 5 : 1) * tol)
        << "adapter " << names[i] << " should move the logits beyond the tolerance";
    RecordProperty(std::string("moved_").append(names[i]), std::to_string(moved));
  }
  RecordProperty("max_rel_l2", std::to_string(worst));

  const EngineProfile prof = (*gpu_engine)->profile();
  if (k.graphs) {
    EXPECT_GT(prof.decode.graph_steps, 0) << "LoRA decode steps should replay graphs";
  } else {
    EXPECT_EQ(prof.decode.graph_steps, 0);
  }
  gpu_engine->reset();
}

std::string case_name(const ::testing::TestParamInfo<Case>& param) {
  std::string name =
      std::string(dtype_name(param.param.dtype)) + (param.param.graphs ? "_graphs" : "_eager");
  if (*param.param.switch_name) {
    name += std::string("_") + param.param.switch_name + param.param.switch_value;
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaEngineLora,
                         ::testing::Values(Case{DType::kF32, true}, Case{DType::kF32, false},
                                           Case{DType::kBF16, true}, Case{DType::kBF16, false},
                                           Case{DType::kF32, true, "IB_LORA_FUSED", "1"},
                                           Case{DType::kBF16, true, "IB_LORA_FUSED", "1"},
                                           Case{DType::kBF16, true, "IB_LORA_IN_GEMV", "0"},
                                           Case{DType::kBF16, true, "IB_LORA_IN_GEMV", "1"},
                                           Case{DType::kBF16, true, "IB_LORA_IN_GEMV", "3"},
                                           Case{DType::kBF16, false, "IB_LORA_IN_GEMV", "3"},
                                           Case{DType::kBF16, true, "IB_LORA_IN_GEMV", "4"},
                                           Case{DType::kBF16, false, "IB_LORA_IN_GEMV", "4"},
                                           Case{DType::kBF16, true, "IB_LORA_IN_GEMV", "5"},
                                           Case{DType::kBF16, false, "IB_LORA_IN_GEMV", "5"},
                                           Case{DType::kBF16, true, "IB_LORA_ATTN", "1"},
                                           Case{DType::kBF16, false, "IB_LORA_ATTN", "1"},
                                           Case{DType::kBF16, true, "IB_LORA_QKV_BLOCKS", "0"}),
                         case_name);

}  // namespace
}  // namespace ib
