// The CUDA engine with --quantization gguf end to end (backend/weight.h's kGguf), against the CPU
// engine on the same GGUF file: a Llama of small_cuda_config's shapes in llama.cpp's Q4_K_M mix
// (Q4_K matrices, Q6_K v and down in the layers that mix gives more bits, a Q6_K lm_head
// dequantized), decode graphs and the fused ops' fallbacks included, and a prompt past 8 tokens
// (the dequantizing path). Both quantize each matmul's input to int8 per 32; the CPU's input is
// fp32 and the GPU's bf16, which flips some of those roundings, so the two differ by noise of the
// size of the activation quantization itself: the bound is 1.5 times the CPU's distance from the
// same file dequantized (--quantization none) plus bf16's own 0.02. A wiring error (a row segment,
// a block's scale, a permutation) gives O(1). Label gpu.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cpu/cpu_backend.h"
#include "engine/detail/checkpoint_test_support.h"
#include "engine/detail/engine_cuda_test_support.h"
#include "engine/detail/engine_test_support.h"
#include "engine/engine.h"
#include "model/gguf.h"
#include "model/presets.h"

namespace ib {
namespace {

using testing::rel_l2;

// The first sampled step's logits of two greedy requests (6 and 12 prompt tokens).
std::vector<std::vector<float>> first_logits(const ModelConfig& c, const std::string& path,
                                             const std::string& quantization, Backend& backend) {
  WeightOptions options{LoadFormat::kGguf, path, 0};
  options.gguf_as_stored = quantization == "gguf";
  auto w = load_weights(c, options, backend);
  EXPECT_TRUE(w.ok()) << w.error().message;
  if (!w.ok()) return {};
  if (quantization == "gguf") {
    EXPECT_EQ(w->layers[0].wqkv.format, WeightFormat::kGguf);
  }
  auto engine = testing::logits_engine(c, std::move(w).value(), quantization, backend);
  EXPECT_TRUE(engine->add_request(testing::greedy_request(1, {1, 17, 99, 3, 42, 8}, 3)).ok());
  EXPECT_TRUE(engine
                  ->add_request(testing::greedy_request(
                      2, {5, 6, 7, 300, 301, 302, 9, 10, 11, 400, 401, 402}, 3))
                  .ok());
  std::vector<std::vector<float>> out;
  for (auto& [id, done] : testing::run_to_completion(*engine)) out.push_back(done.logits.at(0));
  return out;
}

TEST(CudaEngineGguf, MatchesTheCpuEngineOnTheSameFile) {
  IB_REQUIRE_CUDA();
  testing::TempDir dir;
  const std::string path = (dir.path() / "small-Q4_K_M.gguf").string();
  auto mix = gguf_type_mix("Q4_K_M");
  ASSERT_TRUE(mix.ok());
  ASSERT_TRUE(write_dummy_gguf(path, testing::small_cuda_config("gguf-small"), *mix, 7).ok());
  auto c = resolve_model(path);
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto gpu = create_backend({"cuda", DType::kBF16, 0, std::nullopt});
  ASSERT_TRUE(gpu.ok()) << gpu.error().message;
  if (!(*gpu)->supports_weight_format(WeightFormat::kGguf)) GTEST_SKIP() << "no dp4a";
  CpuBackend cpu(2);
  const auto cpu_gguf = first_logits(*c, path, "gguf", cpu);
  const auto cpu_dense = first_logits(*c, path, "none", cpu);
  const auto gpu_gguf = first_logits(*c, path, "gguf", **gpu);
  ASSERT_EQ(cpu_gguf.size(), 2u);
  ASSERT_EQ(cpu_dense.size(), 2u);
  ASSERT_EQ(gpu_gguf.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    const double q8 = rel_l2(cpu_gguf[r], cpu_dense[r]);
    const double got = rel_l2(gpu_gguf[r], cpu_gguf[r]);
    RecordProperty("request" + std::to_string(r + 1) + "_rel_l2", std::to_string(got));
    RecordProperty("request" + std::to_string(r + 1) + "_q8_rel_l2", std::to_string(q8));
    EXPECT_GT(q8, 0.0) << "the int8 activations change nothing: not the kGguf path";
    EXPECT_LT(got, 1.5 * q8 + 0.02) << "request " << r + 1 << " (q8 effect " << q8 << ")";
  }
}

}  // namespace
}  // namespace ib
