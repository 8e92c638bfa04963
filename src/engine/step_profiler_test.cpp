// The step profile: steps classified as decode or prefill, sums and medians, host overhead from
// the device time, the host phases and the gap between steps; and on the CPU engine, each step's
// bytes_moved equals the traffic a step must cause (weights streamed, KV read over the visible
// context, KV written).
#include "engine/detail/step_profiler.h"

#include <gtest/gtest.h>

#include "engine/detail/engine_test_support.h"

namespace ib {
namespace {

StepStats step(int prefill, int decode, int64_t wall_ns, int64_t device_ns, bool graph = false) {
  StepStats s;
  s.num_prefill_tokens = prefill;
  s.num_decode_tokens = decode;
  s.duration_ns = wall_ns;
  s.device_ns = device_ns;
  s.bytes_moved = 1000 * (prefill + decode) + 7;
  s.graph = graph;
  return s;
}

TEST(StepProfiler, ClassifiesStepsAndTakesMedians) {
  detail::StepProfiler p;
  p.add(step(0, 4, 100, 90, true));
  p.add(step(0, 4, 300, 240, true));
  p.add(step(0, 2, 200, 150));
  p.add(step(32, 3, 1000, -1));  // mixed: counted as prefill; no device time
  p.add(step(0, 0, 50, 40));     // nothing scheduled: ignored
  const EngineProfile e = p.summary();
  EXPECT_EQ(e.decode.steps, 3);
  EXPECT_EQ(e.decode.tokens, 10);
  EXPECT_EQ(e.decode.bytes, 10 * 1000 + 3 * 7);
  EXPECT_EQ(e.decode.wall_ns, 600);
  EXPECT_EQ(e.decode.device_ns, 480);
  EXPECT_EQ(e.decode.timed_steps, 3);
  EXPECT_EQ(e.decode.graph_steps, 2);
  EXPECT_DOUBLE_EQ(e.decode.median_step_ns, 200);
  EXPECT_DOUBLE_EQ(e.decode.median_device_ns, 150);
  EXPECT_DOUBLE_EQ(e.decode.median_host_fraction, 0.2);  // of 0.1, 0.2, 0.25
  EXPECT_EQ(e.prefill.steps, 1);
  EXPECT_EQ(e.prefill.tokens, 35);
  EXPECT_EQ(e.prefill.timed_steps, 0);
  EXPECT_DOUBLE_EQ(e.prefill.median_host_fraction, 0.0);
}

// A decode step at start_ns whose batch was built after schedule_ns, enqueued after launch_ns,
// back on the host after wait_ns, and which ended finish_ns later.
StepStats timed_step(int64_t start_ns, int64_t schedule_ns, int64_t launch_ns, int64_t wait_ns,
                     int64_t finish_ns) {
  StepStats s = step(0, 1, schedule_ns + launch_ns + wait_ns + finish_ns, -1);
  s.start_ns = start_ns;
  s.run_start_ns = start_ns + schedule_ns;
  s.launched_ns = s.run_start_ns + launch_ns;
  s.synced_ns = s.launched_ns + wait_ns;
  return s;
}

TEST(StepProfiler, HostPhasesAndTheGapBetweenSteps) {
  detail::StepProfiler p;
  p.add(timed_step(1000, 10, 20, 300, 5));   // ends at 1335
  p.add(timed_step(1400, 30, 40, 100, 15));  // 65 after; ends at 1585
  p.add(timed_step(1600, 20, 30, 200, 25));  // 15 after; ends at 1875
  StepStats untimed = step(0, 1, 50, -1);    // no phase clocks (a step that ran nothing)
  untimed.start_ns = 1950;                   // 75 after the third (which ends at 1875)
  p.add(untimed);
  const StepClassProfile d = p.summary().decode;
  EXPECT_DOUBLE_EQ(d.median_schedule_ns, 20);
  EXPECT_DOUBLE_EQ(d.median_launch_ns, 30);
  EXPECT_DOUBLE_EQ(d.median_wait_ns, 200);
  EXPECT_DOUBLE_EQ(d.median_finish_ns, 15);
  EXPECT_DOUBLE_EQ(d.median_between_steps_ns, 65);  // of 65, 15 and 75
}

TEST(StepProfiler, EngineStepsCarryTheirTraffic) {
  const ModelConfig c = testing::tiny_config();
  EngineConfig config;
  auto e = testing::make_engine(c, config);
  ASSERT_TRUE(e.engine->add_request(testing::greedy_request(1, {5, 6, 7, 8, 9}, 3)).ok());
  const int64_t e_bytes = 4;  // fp32 on the CPU
  int64_t layer_bytes = 0;
  const int64_t d = c.hidden_size, q = int64_t{c.num_heads} * c.head_dim,
                kv = int64_t{c.num_kv_heads} * c.head_dim, f = c.intermediate_size;
  layer_bytes = c.num_layers * (2 * d + (q + 2 * kv) * d + q * d + 2 * f * d + d * f) * e_bytes;
  const int64_t head_bytes = (int64_t{c.vocab_size} * d + d) * e_bytes;  // lm_head + final norm
  const int64_t kv_token = c.kv_bytes_per_token(DType::kF32);
  // Step 1: prefill of 5 tokens; steps 2 and 3: decode at contexts 6 and 7.
  const int64_t expected[] = {
      layer_bytes + 5 * d * e_bytes + head_bytes + 5 * kv_token + 5 * kv_token,
      layer_bytes + d * e_bytes + head_bytes + 6 * kv_token + kv_token,
      layer_bytes + d * e_bytes + head_bytes + 7 * kv_token + kv_token,
  };
  for (int64_t want : expected) {
    auto out = e.engine->step();
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(out->stats.bytes_moved, want);
    EXPECT_EQ(out->stats.device_ns, -1);  // the CPU backend has no device timer
    EXPECT_FALSE(out->stats.graph);
    const StepStats& st = out->stats;  // the phase clocks in order, within the step
    EXPECT_LE(st.start_ns, st.run_start_ns);
    EXPECT_LE(st.run_start_ns, st.launched_ns);
    EXPECT_LE(st.launched_ns, st.synced_ns);
    EXPECT_LE(st.synced_ns, st.start_ns + st.duration_ns);
    EXPECT_GT(st.run_start_ns, 0);
  }
  const EngineProfile p = e.engine->profile();
  EXPECT_EQ(p.prefill.steps, 1);
  EXPECT_EQ(p.decode.steps, 2);
  EXPECT_EQ(p.decode.bytes, expected[1] + expected[2]);
  EXPECT_EQ(p.num_graphs, 0);
  EXPECT_EQ(p.copy_ceiling_bytes_per_s, 0.0);
}

}  // namespace
}  // namespace ib
