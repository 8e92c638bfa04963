// Timeline helpers, allocation-trace analysis (block map, fragmentation) and energy accounting,
// on hand-made inputs whose answers are worked out in the comments.
#include <gtest/gtest.h>

#include <cmath>

#include "telemetry/telemetry.h"

namespace ib {
namespace {

constexpr int64_t kS = 1'000'000'000;
constexpr int64_t kCell = kBlockMapCellBytes;

Timeline make_timeline(const std::vector<std::string>& columns,
                       const std::vector<std::vector<double>>& rows) {
  Timeline tl;
  tl.columns = columns;
  for (size_t i = 0; i < rows.size(); ++i) {
    tl.time_ns.push_back(static_cast<int64_t>(i) * kS);
    tl.rows.push_back(rows[i]);
  }
  return tl;
}

TEST(Timeline, InterpolatesLinearlyAndFindsPeaks) {
  Timeline tl = make_timeline({"a_bytes"}, {{0}, {10}, {NAN}, {30}});
  const int a = tl.column("a_bytes");
  EXPECT_EQ(a, 0);
  EXPECT_EQ(tl.column("missing"), -1);
  EXPECT_DOUBLE_EQ(tl.value_at(a, kS / 4), 2.5);
  EXPECT_DOUBLE_EQ(tl.value_at(a, kS), 10.0);
  EXPECT_TRUE(std::isnan(tl.value_at(a, kS + kS / 2)));  // next to a missing sample
  EXPECT_TRUE(std::isnan(tl.value_at(a, 4 * kS)));       // outside
  EXPECT_DOUBLE_EQ(tl.max_of(a), 30.0);
  tl.add_column("b_bytes", {1, 2, 3, 4});
  EXPECT_DOUBLE_EQ(tl.value_at(tl.column("b_bytes"), 3 * kS), 4.0);
}

TEST(Timeline, PhasesAndStepShares) {
  const std::vector<PhaseSpan> phases = {{"load", 0, kS}, {"run 0", 2 * kS, 3 * kS}};
  EXPECT_EQ(phase_at(phases, kS / 2), "load");
  EXPECT_EQ(phase_at(phases, kS + 1), "idle");
  EXPECT_EQ(phase_at(phases, 2 * kS + 5), "run 0");
  // A prefill-heavy step [0, 100) with 64 prompt tokens, a decode-heavy one [100, 300) with 8.
  const std::vector<StepRecord> steps = {{0, 100, 64, 0}, {100, 200, 0, 8}};
  const StepShare all = step_share(steps, 0, 1000);
  EXPECT_EQ(all.prefill_ns, 100);
  EXPECT_EQ(all.decode_ns, 200);
  EXPECT_DOUBLE_EQ(all.prefill_tokens, 64);
  EXPECT_DOUBLE_EQ(all.decode_tokens, 8);
  // Half of the first step, a quarter of the second.
  const StepShare part = step_share(steps, 50, 150);
  EXPECT_EQ(part.prefill_ns, 50);
  EXPECT_EQ(part.decode_ns, 50);
  EXPECT_DOUBLE_EQ(part.prefill_tokens, 32);
  EXPECT_DOUBLE_EQ(part.decode_tokens, 2);
  EXPECT_EQ(step_kind_in(steps, 0, 120), "prefill");
  EXPECT_EQ(step_kind_in(steps, 0, 300), "decode");
  EXPECT_EQ(step_kind_in(steps, 400, 500), "idle");
}

// steps.csv: a row per step in microseconds, the gap from the previous step's end, empty cells for
// phases a step did not time and for an unmeasured device time.
TEST(Timeline, StepsCsv) {
  const std::vector<PhaseSpan> phases = {{"warm-up", 0, 2'000'000}, {"run 0", 2'000'001, kS}};
  StepRecord a{1'000'000, 500'000, 64, 0};  // [1 ms, 1.5 ms): a prefill step, untimed
  a.num_seqs = 2;
  StepRecord b{2'500'000, 1'250'500, 0, 8};  // 1 ms after a's end, every phase timed
  b.num_seqs = 8;
  b.schedule_ns = 10'000;
  b.launch_ns = 20'000;
  b.wait_ns = 1'200'000;
  b.finish_ns = 20'500;
  b.device_ns = 1'150'000;
  b.graph = true;
  EXPECT_EQ(steps_csv({a, b}, phases),
            "start_ms,phase,num_seqs,prefill_tokens,decode_tokens,duration_us,gap_before_us,"
            "schedule_us,launch_us,wait_us,finish_us,device_us,graph\n"
            "1.000,warm-up,2,64,0,500.0,,,,,,,0\n"
            "2.500,run 0,8,0,8,1250.5,1000.0,10.0,20.0,1200.0,20.5,1150.0,1\n");
}

// Four one-cell blocks in a row at A (act, kv, act, kv), one weights cell far away at B.
std::vector<MemoryEvent> fragmenting_trace(uint64_t a, uint64_t b) {
  const int64_t c = kCell;
  return {
      {100, a, c, MemoryTag::kActivations},
      {100, a + kCell, c, MemoryTag::kKvCache},
      {100, a + 2 * kCell, c, MemoryTag::kActivations},
      {100, a + 3 * kCell, c, MemoryTag::kKvCache},
      {100, b, c / 2, MemoryTag::kWeights},   // half a cell still owns the cell
      {200, a, -c, MemoryTag::kActivations},  // cells 0 and 2 free: 2 extents of 1 cell
      {200, a + 2 * kCell, -c, MemoryTag::kActivations},
      {300, a + kCell, -c, MemoryTag::kKvCache},  // cells 0..2 free: one extent of 3 cells
  };
}

TEST(AllocationMap, FragmentationFollowsFreeExtents) {
  const uint64_t a = 0x7f0000000000;
  const uint64_t b = a + 100 * kCell;
  const auto analysis =
      analyze_allocations(fragmenting_trace(a, b), 0, {{"run 0", 150, 250}}, {50, 150, 250, 350});
  ASSERT_EQ(analysis.events.size(), 8u);
  EXPECT_EQ(analysis.events[5].phase, "run 0");
  EXPECT_EQ(analysis.events[0].phase, "idle");
  EXPECT_EQ(analysis.events[4].tag, "weights");
  EXPECT_EQ(analysis.block_map.region_base.size(), 2u);  // B does not touch A's range
  EXPECT_EQ(analysis.block_map.num_cells, 5);

  const FragmentationPoint before = analysis.fragmentation_at(99);
  EXPECT_EQ(before.span_bytes, 0);
  const FragmentationPoint loaded = analysis.fragmentation_at(100);
  EXPECT_EQ(loaded.span_bytes, 5 * kCell);
  EXPECT_EQ(loaded.allocated_bytes, 4 * kCell + kCell / 2);
  EXPECT_EQ(loaded.total_free_bytes, 0);
  EXPECT_EQ(loaded.external, 0.0);
  const FragmentationPoint holes = analysis.fragmentation_at(250);
  EXPECT_EQ(holes.total_free_bytes, 2 * kCell);
  EXPECT_EQ(holes.largest_free_bytes, kCell);
  EXPECT_DOUBLE_EQ(holes.external, 0.5);
  const FragmentationPoint merged = analysis.fragmentation_at(1000);
  EXPECT_EQ(merged.total_free_bytes, 3 * kCell);
  EXPECT_EQ(merged.largest_free_bytes, 3 * kCell);
  EXPECT_DOUBLE_EQ(merged.external, 0.0);

  // Block map frames (one display row per cell): states index "unmapped", "free", then tags.
  const BlockMap& m = analysis.block_map;
  ASSERT_EQ(m.frames.size(), 4u);
  const auto state = [&](size_t frame, size_t cell) { return m.states[m.frames[frame][cell]]; };
  EXPECT_EQ(state(0, 0), "unmapped");
  EXPECT_EQ(state(1, 0), "activations");
  EXPECT_EQ(state(1, 1), "kv_cache");
  EXPECT_EQ(state(1, 4), "weights");
  EXPECT_EQ(state(2, 0), "free");
  EXPECT_EQ(state(2, 1), "kv_cache");
  EXPECT_EQ(state(3, 1), "free");
  EXPECT_EQ(state(3, 3), "kv_cache");

  // Per step: the fragmentation in force when each step starts.
  const auto s = analysis.summary({{120, 10, 0, 1}, {260, 10, 0, 1}});
  EXPECT_EQ(s["allocs"], 5);
  EXPECT_EQ(s["frees"], 3);
  EXPECT_DOUBLE_EQ(s["external_fragmentation_max_over_steps"].get<double>(), 0.5);
  EXPECT_EQ(s["steps_with_free_space"], 1);
}

TEST(AllocationMap, LiveBytesPerTagReplayTheTrace) {
  const uint64_t a = 0x7f0000000000;
  const auto live =
      live_bytes_by_tag(fragmenting_trace(a, a + 100 * kCell), 0, {50, 100, 250, 400});
  ASSERT_EQ(live.size(), 4u);
  const auto at = [&](size_t i, MemoryTag t) { return live[i][static_cast<size_t>(t)]; };
  EXPECT_EQ(at(0, MemoryTag::kActivations), 0);
  EXPECT_EQ(at(1, MemoryTag::kActivations), 2 * kCell);
  EXPECT_EQ(at(1, MemoryTag::kWeights), kCell / 2);
  EXPECT_EQ(at(2, MemoryTag::kActivations), 0);
  EXPECT_EQ(at(2, MemoryTag::kKvCache), 2 * kCell);
  EXPECT_EQ(at(3, MemoryTag::kKvCache), kCell);
}

TEST(AllocationMap, DisplayRowsShowTheMajorityOfTheirCells) {
  const uint64_t a = 0x10000000;
  std::vector<MemoryEvent> trace = {{1, a, 3 * kCell, MemoryTag::kKvCache},
                                    {1, a + 3 * kCell, kCell, MemoryTag::kWeights}};
  const auto analysis = analyze_allocations(trace, 0, {}, {10}, 2);  // 4 cells -> 2 rows of 2
  ASSERT_EQ(analysis.block_map.cells_per_row, 2);
  const auto& row = analysis.block_map.frames.at(0);
  ASSERT_EQ(row.size(), 2u);
  EXPECT_EQ(analysis.block_map.states[row[0]], "kv_cache");
  // One kv cell and one weights cell: a tie goes to the state listed later (kv_cache).
  EXPECT_EQ(analysis.block_map.states[row[1]], "kv_cache");
}

TEST(Energy, CounterDeltasPerPhaseAndPerStepKind) {
  // Counter: 10 J per second; power reads 0 to show it is not used when the counter exists.
  const Timeline tl = make_timeline({"gpu0_energy_j", "gpu0_power_w"},
                                    {{0, 0}, {10, 0}, {20, 0}, {30, 0}, {40, 0}});
  const std::vector<PhaseSpan> phases = {{"load", 0, kS / 2}, {"run 0", kS, 3 * kS}};
  const std::vector<StepRecord> steps = {{kS, kS, 64, 0}, {2 * kS, kS, 0, 8}};
  const auto e = energy_report(tl, phases, steps, {{"run 0", 100}});
  EXPECT_EQ(e["available"], true);
  EXPECT_EQ(e["method"], "energy_counter");
  EXPECT_TRUE(e["flag"].is_null());
  EXPECT_DOUBLE_EQ(e["total_joules"].get<double>(), 40.0);
  EXPECT_DOUBLE_EQ(e["phases"][0]["joules"].get<double>(), 5.0);
  EXPECT_TRUE(e["phases"][0]["tokens_per_joule"].is_null());
  EXPECT_DOUBLE_EQ(e["phases"][1]["joules"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(e["phases"][1]["tokens_per_joule"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(e["output_tokens_per_joule"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(e["median_joules_per_run"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(e["prefill_heavy_steps"]["joules"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(e["prefill_heavy_steps"]["tokens_per_joule"].get<double>(), 6.4);
  EXPECT_DOUBLE_EQ(e["decode_heavy_steps"]["joules"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(e["decode_heavy_steps"]["tokens_per_joule"].get<double>(), 0.8);
}

TEST(Energy, APhaseTheCounterDidNotSeeUsesPower) {
  // The counter stands still from 1 s to 3 s while the board draws 50 W.
  const Timeline tl = make_timeline({"gpu0_energy_j", "gpu0_power_w"},
                                    {{0, 50}, {50, 50}, {50, 50}, {50, 50}, {100, 50}});
  const auto e = energy_report(tl, {{"run 0", kS, 3 * kS}, {"run 1", 3 * kS, 4 * kS}}, {},
                               {{"run 0", 10}, {"run 1", 10}});
  EXPECT_EQ(e["method"], "energy_counter");
  EXPECT_DOUBLE_EQ(e["phases"][0]["joules"].get<double>(), 100.0);
  EXPECT_NE(e["phases"][0]["method"].get<std::string>().find("integrated_power"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(e["phases"][1]["joules"].get<double>(), 50.0);
  EXPECT_EQ(e["phases"][1]["method"], "energy_counter");
}

TEST(Energy, FallsBackToIntegratedPowerAndSaysSo) {
  // Two GPUs without counters: 100 W + 50 W for 4 s.
  const Timeline tl = make_timeline(
      {"gpu0_power_w", "gpu1_power_w", "gpu0_energy_j"},
      {{100, 50, NAN}, {100, 50, NAN}, {100, 50, NAN}, {100, 50, NAN}, {100, 50, NAN}});
  const auto e = energy_report(tl, {{"run 0", kS, 3 * kS}}, {}, {{"run 0", 600}});
  EXPECT_EQ(e["method"], "integrated_power");
  EXPECT_FALSE(e["flag"].is_null());
  EXPECT_EQ(e["gpus"], 2);
  EXPECT_DOUBLE_EQ(e["phases"][0]["joules"].get<double>(), 300.0);
  EXPECT_DOUBLE_EQ(e["phases"][0]["tokens_per_joule"].get<double>(), 2.0);

  const auto none = energy_report(make_timeline({"rss_bytes"}, {{1}, {2}}), {}, {}, {});
  EXPECT_EQ(none["available"], false);
}

}  // namespace
}  // namespace ib
