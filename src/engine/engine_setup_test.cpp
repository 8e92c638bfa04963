// Engine construction and admission: KV pool sizing (CPU budget and cap, explicit block count,
// memory limit, max_model_len resolution), request validation, config validation, stats.
#include <gtest/gtest.h>

#include "engine/detail/engine_test_support.h"
#include "engine/engine.h"

namespace ib {
namespace {

using testing::greedy_request;
using testing::tiny_config;

// tiny_config: 2 layers x 2 KV heads x head_dim 16 x K and V x fp32 = 512 bytes per token.
constexpr int64_t kTokenBytes = 512;

Result<std::unique_ptr<Engine>> try_engine(CpuBackend& backend, const EngineConfig& config) {
  return create_engine(tiny_config(), {LoadFormat::kDummy, "", 0}, config, backend);
}

TEST(EngineSetup, CpuPoolIsCappedAtMaxSeqsTimesModelLength) {
  CpuBackend backend(2);
  EngineConfig config;
  config.block_size = 4;
  config.max_num_seqs = 4;
  auto e = try_engine(backend, config);
  ASSERT_TRUE(e.ok()) << e.error().message;
  const EngineStats st = (*e)->stats();
  EXPECT_EQ(st.kv_blocks_total, 4 * 256 / 4);
  EXPECT_EQ(st.kv_block_bytes, 4 * kTokenBytes);
  EXPECT_EQ(st.max_model_len, 256);
  EXPECT_EQ((*e)->config().num_kv_blocks, 256);
  EXPECT_EQ(st.memory.bytes_by_tag[static_cast<size_t>(MemoryTag::kKvCache)],
            256 * 4 * kTokenBytes);
  EXPECT_EQ(st.memory.bytes_by_tag[static_cast<size_t>(MemoryTag::kWeights)], st.weight_bytes);
  EXPECT_GT(st.memory.bytes_by_tag[static_cast<size_t>(MemoryTag::kActivations)], 0);
  EXPECT_EQ((*e)->weights_description(), "dummy (seed 0)");
}

TEST(EngineSetup, SmallBudgetShortensAnAutomaticModelLength) {
  CpuBackend backend(2);
  EngineConfig config;
  config.block_size = 4;
  config.cpu_kv_cache_bytes = 50 * 4 * kTokenBytes;  // 50 blocks = 200 tokens
  auto e = try_engine(backend, config);
  ASSERT_TRUE(e.ok()) << e.error().message;
  EXPECT_EQ((*e)->stats().kv_blocks_total, 50);
  EXPECT_EQ((*e)->config().max_model_len, 200);
  // 150 + 51 > 200
  const Status too_long = (*e)->add_request(greedy_request(1, std::vector<int32_t>(150, 1), 51));
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.error().message.find("exceeds max_model_len 200"), std::string::npos)
      << too_long.error().message;
  EXPECT_TRUE((*e)->add_request(greedy_request(2, std::vector<int32_t>(150, 1), 50)).ok());

  config.max_model_len = 256;  // explicit and larger than the pool: refused with both numbers
  auto refused = try_engine(backend, config);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::kUser);
  EXPECT_NE(refused.error().message.find("holds 200 tokens"), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("--max-model-len is 256"), std::string::npos);
}

TEST(EngineSetup, ExplicitBlocksAndMemoryLimit) {
  CpuBackend backend(2);
  EngineConfig config;
  config.block_size = 4;
  config.num_kv_blocks = 80;
  config.max_model_len = 64;
  auto e = try_engine(backend, config);
  ASSERT_TRUE(e.ok()) << e.error().message;
  EXPECT_EQ((*e)->stats().kv_blocks_total, 80);
  EXPECT_EQ((*e)->config().max_model_len, 64);
  e->reset();

  // A memory limit leaves room for 30 blocks after weights and activations.
  CpuBackend limited(2);
  EngineConfig auto_config;
  auto_config.block_size = 4;
  auto_config.max_num_batched_tokens = 64;
  auto probe = try_engine(limited, auto_config);
  ASSERT_TRUE(probe.ok());
  const int64_t non_kv =
      limited.memory().snapshot().allocated_bytes -
      limited.memory().snapshot().bytes_by_tag[static_cast<size_t>(MemoryTag::kKvCache)];
  probe->reset();
  limited.memory().set_limit_bytes(non_kv + 30 * 4 * kTokenBytes + 100);
  auto capped = try_engine(limited, auto_config);
  ASSERT_TRUE(capped.ok()) << capped.error().message;
  EXPECT_EQ((*capped)->stats().kv_blocks_total, 30);
  EXPECT_EQ((*capped)->config().max_model_len, 120);
}

// vLLM's device-dependent batch limits (EngineArgs' batch defaults).
TEST(EngineSetup, BatchDefaultsFollowVllmByDevice) {
  const auto check = [](std::string_view name, int64_t gib, bool server, int seqs, int tokens) {
    const BatchDefaults d = vllm_batch_defaults(name, gib << 30, server);
    EXPECT_EQ(d.max_num_seqs, seqs) << name << " " << gib << " GiB";
    EXPECT_EQ(d.max_num_batched_tokens, tokens) << name << " " << gib << " GiB";
  };
  check("NVIDIA H200", 141, false, 1024, 16384);
  check("NVIDIA H200", 141, true, 1024, 8192);
  check("NVIDIA H100 80GB HBM3", 79, false, 1024, 16384);
  check("AMD Instinct MI300X", 192, false, 1024, 16384);
  check("some GPU", 70, false, 1024, 16384);  // the bound is inclusive
  check("NVIDIA A100-SXM4-80GB", 80, false, 256, 8192);
  check("NVIDIA A100 80GB PCIe", 80, true, 256, 8192);
  check("NVIDIA L40S", 44, false, 256, 8192);
  check("", 0, false, 256, 8192);  // no GPU
}

TEST(EngineSetup, BadConfigsAreUserErrors) {
  CpuBackend backend(1);
  auto error_of = [&](EngineConfig c) {
    auto e = try_engine(backend, c);
    EXPECT_FALSE(e.ok());
    if (e.ok()) return std::string();
    EXPECT_EQ(e.error().kind, ErrorKind::kUser);
    return e.error().message;
  };
  EngineConfig c;
  c.max_num_seqs = 0;
  EXPECT_NE(error_of(c).find("--max-num-seqs"), std::string::npos);
  c = {};
  c.gpu_memory_utilization = 1.5;
  EXPECT_NE(error_of(c).find("--gpu-memory-utilization"), std::string::npos);
  c = {};
  c.max_model_len = 1000;
  EXPECT_NE(error_of(c).find("exceeds model 'tiny-test' context of 256"), std::string::npos);
  // Each setting's error names its flag (every one of them a flag of `inferbench run`), or the
  // setting itself where no flag sets it.
  const struct {
    void (*set)(EngineConfig&);
    const char* named;
  } cases[] = {
      {[](EngineConfig& e) { e.block_size = 0; }, "--block-size must be positive"},
      {[](EngineConfig& e) { e.max_num_batched_tokens = -1; }, "--max-num-batched-tokens"},
      {[](EngineConfig& e) { e.static_batch_size = 0; }, "--batch-size"},
      {[](EngineConfig& e) { e.cpu_kv_cache_bytes = 0; }, "--kv-cache-memory"},
      {[](EngineConfig& e) { e.max_graph_batch = 0; }, "--max-graph-batch"},
      {[](EngineConfig& e) { e.max_graph_context = 0; }, "--max-graph-context"},
      {[](EngineConfig& e) { e.max_model_len = -3; }, "--max-model-len"},
      {[](EngineConfig& e) { e.num_kv_blocks = -1; }, "the engine setting num_kv_blocks"},
  };
  for (const auto& k : cases) {
    c = {};
    k.set(c);
    EXPECT_NE(c.validate().error().message.find(k.named), std::string::npos) << k.named;
    EXPECT_NE(error_of(c).find(k.named), std::string::npos) << k.named;
  }
  c = {};
  c.max_model_len = 200;
  c.cpu_kv_cache_bytes = 10 * kTokenBytes;  // too small for one 200-token sequence
  EXPECT_NE(error_of(c).find("raise --kv-cache-memory"), std::string::npos) << error_of(c);
}

// --block-sparse-attention: the pattern's form is checked with the other settings, and a model
// whose attention it does not combine with is refused before any weight loads.
TEST(EngineSetup, BlockSparseAttentionIsParsedAndChecked) {
  const BlockSparse b = parse_block_sparse("local_blocks=16,vert_stride=8").value();
  EXPECT_EQ(b.block_size, 64);
  EXPECT_EQ(b.local_blocks, 16);
  EXPECT_EQ(b.vert_stride, 8);
  EXPECT_FALSE(parse_block_sparse("").value().enabled());
  EXPECT_EQ(parse_block_sparse("vert_stride=2,block_size=32,local_blocks=3").value().block_size,
            32);
  for (const char* bad :
       {"local_blocks=16", "local_blocks=16,vert_stride=0", "local_blocks=4,vert_stride=x",
        "local_blocks=4,vert_stride=2,stride=3", "16,8", "local_blocks=4,vert_stride=2,",
        "local_blocks=-1,vert_stride=2"}) {
    EngineConfig c;
    c.block_sparse_attention = bad;
    const Status st = c.validate();
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.error().kind, ErrorKind::kUser);
    EXPECT_NE(st.error().message.find("--block-sparse-attention"), std::string::npos) << bad;
    EXPECT_NE(st.error().message.find("local_blocks=L,vert_stride=S"), std::string::npos) << bad;
  }
  CpuBackend backend(1);
  EngineConfig c;
  c.block_sparse_attention = "local_blocks=2,vert_stride=2";
  ModelConfig windowed = tiny_config();
  windowed.sliding_window = 8;
  auto e = create_engine(windowed, {LoadFormat::kDummy, "", 0}, c, backend);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().kind, ErrorKind::kUser);
  EXPECT_NE(e.error().message.find("sliding window"), std::string::npos) << e.error().message;
  EXPECT_TRUE(try_engine(backend, c).ok());
}

TEST(EngineSetup, RequestsAreValidated) {
  CpuBackend backend(1);
  EngineConfig config;
  config.block_size = 4;
  auto e = try_engine(backend, config);
  ASSERT_TRUE(e.ok());
  Engine& engine = **e;
  auto error_of = [&](const GenerationRequest& r) {
    const Status s = engine.add_request(r);
    EXPECT_FALSE(s.ok());
    if (s.ok()) return std::string();
    EXPECT_EQ(s.error().kind, ErrorKind::kUser);
    return s.error().message;
  };
  EXPECT_NE(error_of(greedy_request(1, {}, 4)).find("empty prompt"), std::string::npos);
  EXPECT_NE(error_of(greedy_request(1, {1}, 0)).find("max_tokens must be positive"),
            std::string::npos);
  EXPECT_NE(error_of(greedy_request(1, {1, 101}, 4)).find("token id 101 is outside the vocabulary"),
            std::string::npos);
  GenerationRequest bad_p = greedy_request(1, {1}, 4);
  bad_p.sampling.top_p = 0;
  EXPECT_NE(error_of(bad_p).find("top_p"), std::string::npos);
  ASSERT_TRUE(engine.add_request(greedy_request(1, {1}, 4)).ok());
  EXPECT_NE(error_of(greedy_request(1, {2}, 4)).find("already in use"), std::string::npos);
  // Once finished, the id may be used again.
  testing::run_to_completion(engine);
  EXPECT_TRUE(engine.add_request(greedy_request(1, {2}, 4)).ok());
  engine.abort_request(1);
  const auto done = testing::run_to_completion(engine);
  EXPECT_EQ(done.at(1).finish, FinishReason::kAborted);
  EXPECT_TRUE(done.at(1).tokens.empty());
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

TEST(EngineSetup, StepStatsCountPrefillAndDecodeTokens) {
  CpuBackend backend(1);
  EngineConfig config;
  config.max_num_batched_tokens = 6;
  auto e = try_engine(backend, config);
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE((*e)->add_request(greedy_request(1, {1, 2, 3, 4}, 3)).ok());
  ASSERT_TRUE((*e)->add_request(greedy_request(2, {5, 6, 7, 8, 9}, 2)).ok());
  std::vector<std::tuple<int, int, int>> seen;  // (seqs, prefill, decode)
  while ((*e)->has_unfinished()) {
    auto out = (*e)->step();
    ASSERT_TRUE(out.ok());
    seen.emplace_back(out->stats.num_seqs, out->stats.num_prefill_tokens,
                      out->stats.num_decode_tokens);
    EXPECT_GE(out->stats.duration_ns, 0);
  }
  // 1: A's prompt and 2 of B's; 2: A decodes, B's last 3; 3: both decode, both finish.
  const std::vector<std::tuple<int, int, int>> want = {{2, 6, 0}, {2, 3, 1}, {2, 0, 2}};
  EXPECT_EQ(seen, want);
  EXPECT_EQ((*e)->stats().steps, 3);
}

}  // namespace
}  // namespace ib
