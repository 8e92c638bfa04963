// The find-oom probe: the whole batch must be in flight at once even when chunked prefill
// (max_num_batched_tokens a step) needs several steps to admit it, so that the token budget
// never decides a memory threshold.
#include "orchestrate/detail/sweep_probe.h"
#include "backend/backend_factory.h"

#include <gtest/gtest.h>

#include "model/presets.h"

namespace ib::detail {
namespace {

ProbeSpec chunked_spec(int batch) {
  ProbeSpec spec;
  spec.model = find_preset("tiny-15m").value();
  spec.weights.format = LoadFormat::kDummy;
  spec.engine.max_num_batched_tokens = 64;  // two 32-token prompts a step
  spec.engine.max_num_seqs = 16;
  spec.engine.use_graphs = false;
  spec.engine.cpu_kv_cache_bytes = int64_t{256} << 20;
  spec.engine.max_model_len = 32 + 4;  // as find_oom sets it: input + steps
  spec.batch = batch;
  spec.input_len = 32;
  spec.steps = 4;
  return spec;
}

TEST(SweepProbe, MaxTokensCoverTheStepsChunkedPrefillNeedsToAdmitTheBatch) {
  EXPECT_EQ(probe_max_tokens(chunked_spec(1)), 4);  // one step admits it: just the steps
  EXPECT_EQ(probe_max_tokens(chunked_spec(2)), 5);  // 64 tokens in 62 a step: 2 steps
  // 6 x 32 tokens at 58 a step: 4 steps to admit, 3 more tokens for the first requests.
  EXPECT_EQ(probe_max_tokens(chunked_spec(6)), 7);
}

TEST(SweepProbe, WholeBatchInFlightAtOnceWhenPrefillIsChunked) {
  auto backend = create_backend(BackendOptions{"cpu", DType::kF32, 2, int64_t{1} << 30});
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  for (const int batch : {3, 6, 12}) {
    auto r = run_probe(**backend, chunked_spec(batch));
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_TRUE(r->ok) << "batch " << batch << ": " << r->message;
    EXPECT_EQ(r->concurrent, batch);
    EXPECT_FALSE(r->oom);
    EXPECT_EQ(r->preemptions, 0);
  }
}

}  // namespace
}  // namespace ib::detail
