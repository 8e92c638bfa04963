// End to end: `inferbench sweep` on tiny-15m (CPU) — the grid's outputs, resume, the duration
// estimate's refusal, an out-of-memory cell that does not stop the sweep, and --find-oom
// thresholds checked against the arithmetic of fixed bytes + KV bytes per token.
#include <cmath>

#include <nlohmann/json.hpp>

#include "cli/detail/e2e_support.h"
#include "model/presets.h"

namespace ib {
namespace {

using nlohmann::json;
using testing::lines_of;
namespace fs = std::filesystem;

class SweepE2e : public testing::E2e {
 protected:
  json read_json(const fs::path& p) { return json::parse(read_file(p).value()); }
  std::vector<std::string> sweep(const fs::path& dir, const std::string& batches,
                                 const std::string& lens) {
    return {"sweep",     "--model",      "tiny-15m", "--batch-sizes", batches, "--input-lens",
            lens,        "--output-len", "4",        "--num-warmups", "0",     "--result-dir",
            dir.string()};
  }
};

TEST_F(SweepE2e, GridOutputsParseAndResumeSkipsDoneCells) {
  const fs::path dir = root_ / "grid";
  ASSERT_EQ(run(sweep(dir, "1,2", "8,16")), 0) << err();
  const json grid = read_json(dir / "grid.json");
  ASSERT_EQ(grid["cells"].size(), 4u);
  for (const auto& c : grid["cells"]) {
    EXPECT_EQ(c["status"], "ok") << c.dump();
    EXPECT_GT(c["output_throughput"].get<double>(), 0);
    EXPECT_GT(c["peak_allocated_bytes"].get<double>(), 0);
    EXPECT_GT(c["peak_demand_bytes"].get<double>(), 0);
    EXPECT_LE(c["peak_demand_bytes"].get<double>(), c["peak_allocated_bytes"].get<double>());
    EXPECT_GE(c["step_jitter_ms"].get<double>(), 0);
    EXPECT_FALSE(c["oom"].get<bool>());
    EXPECT_EQ(c["completed"].get<int>(), c["batch_size"].get<int>());
    // Each cell is a normal result directory.
    const json r = read_json(fs::path(c["result_dir"].get<std::string>()) / "result.json");
    EXPECT_EQ(r["config"]["input_len"], std::to_string(c["input_len"].get<int>()));
  }
  EXPECT_TRUE(grid["estimate"]["method"].get<std::string>().find("calibrated roofline") == 0);
  const auto csv = lines_of(dir / "grid.csv");
  ASSERT_EQ(csv.size(), 5u);
  EXPECT_EQ(csv[0].rfind("batch_size,input_len,status,output_throughput", 0), 0u);
  EXPECT_NE(out().find("| batch | input | status |"), std::string::npos) << out();
  for (const char* f : {"grid_throughput.svg", "grid_peak_memory.svg"}) {
    EXPECT_NE(read_file(dir / f).value().find("<svg"), std::string::npos) << f;
  }
  EXPECT_NE(err().find("sweep cell 4/4"), std::string::npos) << err();

  // Again without --resume: refused (the grid is kept).
  EXPECT_EQ(run(sweep(dir, "1,2", "8,16")), 2);
  EXPECT_NE(err().find("--resume"), std::string::npos) << err();

  // One cell forgotten (as after Ctrl-C): --resume runs only that one.
  json edited = grid;
  edited["cells"][3]["status"] = "pending";
  ASSERT_TRUE(write_file_atomic(dir / "grid.json", edited.dump()).ok());
  auto args = sweep(dir, "1,2", "8,16");
  args.push_back("--resume");
  ASSERT_EQ(run(args), 0) << err();
  EXPECT_NE(err().find("sweep cell 1/1 (batch 2, input 16)"), std::string::npos) << err();
  EXPECT_EQ(read_json(dir / "grid.json")["cells"][3]["status"], "ok");
}

TEST_F(SweepE2e, GridBeyondMaxDurationIsRefusedWithTheEstimate) {
  auto args = sweep(root_ / "big", "64,128", "256,512");
  args[8] = "256";  // --output-len
  args.insert(args.end(), {"--max-duration", "1s"});
  EXPECT_EQ(run(args), 2);
  EXPECT_NE(err().find("estimated at"), std::string::npos) << err();
  EXPECT_NE(err().find("--max-duration 1s"), std::string::npos) << err();
  EXPECT_FALSE(fs::exists(root_ / "big" / "cells"));
}

TEST_F(SweepE2e, FindOomThresholdMatchesKvArithmetic) {
  const ModelConfig m = find_preset("tiny-15m").value();
  const int input = 32, steps = 4, block = 16;
  const int64_t block_bytes = block * m.kv_bytes_per_token(DType::kF32);
  const int64_t blocks_per_seq = (input + steps - 1 + block - 1) / block;
  auto find = [&](const fs::path& dir, int64_t limit) {
    return run({"sweep", "--find-oom", "--model", "tiny-15m", "--input-lens", std::to_string(input),
                "--oom-steps", std::to_string(steps), "--oom-max-batch", "16", "--find-oom-batch",
                "2", "--memory-limit", std::to_string(limit), "--result-dir", dir.string()});
  };
  // A generous limit first: the fixed bytes (weights + activations) of this configuration.
  ASSERT_EQ(find(root_ / "wide", int64_t{2} << 30), 0) << err();
  const json wide = read_json(root_ / "wide" / "oom.json");
  const json& first = wide["modes"][0]["batch_search"][0];
  EXPECT_TRUE(first["cap_reached"].get<bool>());
  EXPECT_EQ(first["kv_block_bytes"].get<int64_t>(), block_bytes);
  const int64_t fixed = first["engine_fixed_bytes"].get<int64_t>();
  EXPECT_GE(fixed, m.parameter_count() * 4);  // fp32 weights, then activations

  // Room for 5.5 sequences of KV beyond the fixed bytes: 5 fit, 6 do not, in both modes.
  const int64_t limit = fixed + blocks_per_seq * block_bytes * 11 / 2;
  const int64_t expected = (limit - fixed) / block_bytes / blocks_per_seq;
  ASSERT_EQ(expected, 5);
  ASSERT_EQ(find(root_ / "tight", limit), 0) << err();
  const json oom = read_json(root_ / "tight" / "oom.json");
  ASSERT_EQ(oom["modes"].size(), 2u);
  for (const auto& mode : oom["modes"]) {
    const json& b = mode["batch_search"][0];
    EXPECT_EQ(b["max_batch"].get<int64_t>(), expected) << mode["kv_cache_growth"];
    bool saw_failure = false;
    for (const auto& p : b["probes"]) {
      EXPECT_EQ(p["ok"].get<bool>(), p["batch"].get<int64_t>() <= expected) << p.dump();
      EXPECT_LE(p["peak_bytes"].get<int64_t>(), limit);
      if (!p["ok"].get<bool>()) {
        saw_failure = true;
        if (mode["kv_cache_growth"] == "on-demand")
          EXPECT_TRUE(p["oom"].get<bool>());
        else
          EXPECT_TRUE(p["preemptions"].get<int64_t>() > 0 ||
                      p["max_concurrent"].get<int64_t>() < p["batch"].get<int64_t>());
      }
    }
    EXPECT_TRUE(saw_failure);
    // The longest context at batch 2: its share of the room, in whole blocks, less the
    // generated tokens (the last is never cached).
    const json& c = mode["context_search"];
    const int64_t room_blocks = (limit - c["engine_fixed_bytes"].get<int64_t>()) / block_bytes;
    EXPECT_EQ(c["max_input_len"].get<int64_t>(), room_blocks / 2 * block - steps + 1)
        << mode["kv_cache_growth"];
  }
  // --kv-cache-dtype fp8 under the same limit: a quarter of fp32's block bytes, so more than
  // twice the batch fits (the thresholds to set beside bf16's on a GPU).
  ASSERT_EQ(
      run({"sweep", "--find-oom", "--model", "tiny-15m", "--input-lens", std::to_string(input),
           "--oom-steps", std::to_string(steps), "--oom-max-batch", "16", "--kv-cache-dtype", "fp8",
           "--memory-limit", std::to_string(limit), "--result-dir", (root_ / "fp8").string()}),
      0)
      << err();
  for (const auto& mode : read_json(root_ / "fp8" / "oom.json")["modes"]) {
    const json& b = mode["batch_search"][0];
    EXPECT_EQ(b["kv_block_bytes"].get<int64_t>(), block_bytes / 4) << mode["kv_cache_growth"];
    EXPECT_GT(b["max_batch"].get<int64_t>(), 2 * expected) << mode["kv_cache_growth"];
  }
  // Every probe was also kept on disk as it finished, one JSON line each, in search order.
  size_t recorded = 0;
  for (const auto& mode : oom["modes"]) {
    recorded += mode["batch_search"][0]["probes"].size() + mode["context_search"]["probes"].size();
  }
  const auto lines = testing::lines_of(root_ / "tight" / "oom_probes.jsonl");
  EXPECT_EQ(lines.size(), recorded);
  ASSERT_FALSE(lines.empty());
  const json first_line = json::parse(lines.front());
  EXPECT_EQ(first_line["kv_cache_growth"], "on-demand");
  EXPECT_EQ(first_line["search"], "batch");
  EXPECT_EQ(first_line["batch"], 1);
  EXPECT_EQ(json::parse(lines.back())["search"], "context");
  EXPECT_NE(read_file(root_ / "tight" / "oom.md").value().find("| on-demand | 32 | 5 |"),
            std::string::npos);
  EXPECT_NE(read_file(root_ / "tight" / "oom_headroom.svg").value().find("<polyline"),
            std::string::npos);

  // A grid cell that runs out of memory is marked, and the sweep goes on to the next.
  const fs::path grid_dir = root_ / "oomgrid";
  auto args = sweep(grid_dir, "1,128", "32");
  args.insert(args.end(), {"--kv-cache-growth", "on-demand", "--memory-limit",
                           std::to_string(limit + (64 << 20))});
  ASSERT_EQ(run(args), 0) << err();
  const json grid = read_json(grid_dir / "grid.json");
  EXPECT_EQ(grid["cells"][0]["status"], "ok") << grid["cells"][0].dump();
  EXPECT_EQ(grid["cells"][1]["status"], "oom") << grid["cells"][1].dump();
  EXPECT_TRUE(grid["cells"][1]["oom"].get<bool>());
  EXPECT_TRUE(grid["cells"][1]["steps_before_oom"].is_number());
}

TEST_F(SweepE2e, RunRecordsTheMemoryLimitAndRefusesWhatDoesNotFit) {
  const fs::path dir = root_ / "run";
  ASSERT_EQ(run({"run",
                 "--model",
                 "tiny-15m",
                 "--num-prompts",
                 "2",
                 "--batch-size",
                 "2",
                 "--input-len",
                 "8",
                 "--output-len",
                 "2",
                 "--runs",
                 "1",
                 "--disable-telemetry",
                 "--memory-limit",
                 "1GiB",
                 "--kv-cache-growth",
                 "on-demand",
                 "--result-dir",
                 dir.string()}),
            0)
      << err();
  const json r = read_json(dir / "result.json");
  EXPECT_EQ(r["config"]["memory_limit_bytes"].get<int64_t>(), int64_t{1} << 30);
  EXPECT_EQ(r["config"]["kv_cache_growth"], "on-demand");
  EXPECT_EQ(r["engine"]["engine"]["kv_growth"], "on-demand");
  EXPECT_FALSE(r["engine"]["oom"]["oom"].get<bool>());
  EXPECT_LE(r["engine"]["oom"]["peak_allocated_bytes"].get<int64_t>(), int64_t{1} << 30);
  // The CPU backend honours the cap: 8 MiB cannot hold tiny-15m's weights.
  EXPECT_EQ(run({"run", "--model", "tiny-15m", "--memory-limit", "8MiB", "--result-dir",
                 (root_ / "small").string()}),
            2);
  EXPECT_NE(err().find("memory limit"), std::string::npos) << err();
  EXPECT_EQ(
      run({"run", "--kv-cache-growth", "sometimes", "--result-dir", (root_ / "bad").string()}), 2);
  EXPECT_NE(err().find("--kv-cache-growth sometimes"), std::string::npos) << err();
}

}  // namespace
}  // namespace ib
