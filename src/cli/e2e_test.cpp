// End-to-end tests of the real inferbench binary (INFERBENCH_BINARY, set by ib_test): a small
// run writes a consistent result directory; each kind of bad input exits 2 with one line and
// leaves nothing; SIGINT keeps the finished requests and marks the result interrupted.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/detail/e2e_support.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::E2e;
using testing::lines_of;
using testing::spawn;
using testing::wait_exit;

TEST_F(E2e, SmallRunWritesAConsistentResultDirectory) {
  const fs::path dir = root_ / "result";
  // A CUDA switch and a misspelt one, set for a CPU run: recorded, not applied, and warned about.
  ::setenv("IB_ATTN_PREFETCH", "2", 1);
  ::setenv("IB_L2_PREFECH", "1", 1);
  const int code = run({"run", "--model", "tiny-15m", "--num-prompts", "6", "--input-len", "16",
                        "--output-len", "8", "--batch-size", "3", "--runs", "2", "--result-dir",
                        dir.string(), "--num-threads", "2"});
  ::unsetenv("IB_ATTN_PREFETCH");
  ::unsetenv("IB_L2_PREFECH");
  ASSERT_EQ(code, 0) << err();
  EXPECT_NE(err().find("warning: IB_L2_PREFECH is set but is not a kernel switch"),
            std::string::npos)
      << err();

  const json r = json::parse(read_file(dir / "result.json").value());
  EXPECT_EQ(r["model_id"], "tiny-15m");
  EXPECT_EQ(r["backend"], "native");
  EXPECT_EQ(r["num_prompts"], 6);
  EXPECT_EQ(r["completed"], 6);
  EXPECT_EQ(r["failed"], 0);
  EXPECT_EQ(r["total_input_tokens"], 6 * 16);
  EXPECT_EQ(r["total_output_tokens"], 6 * 8);
  EXPECT_EQ(r["interrupted"], false);
  EXPECT_EQ(r["num_runs"], 2);
  ASSERT_EQ(r["runs"].size(), 2u);
  EXPECT_GT(r["output_throughput"].get<double>(), 0);
  EXPECT_GT(r["mean_ttft_ms"].get<double>(), 0);
  EXPECT_GT(r["p99_itl_ms"].get<double>(), 0);
  EXPECT_EQ(r["config"]["batch_size"], 3);
  EXPECT_EQ(r["weights"], "dummy (seed 0)");
  EXPECT_FALSE(r["env"]["inferbench"]["git_sha"].get<std::string>().empty());
  EXPECT_EQ(r["kernel_switches"]["IB_ATTN_PREFETCH"],
            (json{{"value", "2"}, {"source", "env"}, {"applies", false}}));
  for (const auto& [name, setting] : r["kernel_switches"].items()) {
    EXPECT_FALSE(setting["applies"].get<bool>()) << name;  // the CPU backend reads none
  }
  EXPECT_FALSE(r["engine"].contains("kernel_switches"));  // lifted to the top level
  EXPECT_EQ(r["env"]["ib_variables"]["IB_L2_PREFECH"], "1");
  EXPECT_GT(r["memory"]["rss"]["peak_rss_bytes"].get<int64_t>(), 0);
  // fp32 weights; each tensor's allocation is rounded up to 256 bytes.
  const int64_t weights = r["memory"]["engine-pools"]["weights_bytes"].get<int64_t>();
  const int64_t params = r["engine"]["model"]["parameters"].get<int64_t>();
  EXPECT_GE(weights, params * 4);
  EXPECT_LE(weights, params * 4 + 256 * (8 * r["engine"]["model"]["num_layers"].get<int>() + 4));
  const double lo = r["spread"]["output_throughput"]["min"].get<double>();
  const double hi = r["spread"]["output_throughput"]["max"].get<double>();
  EXPECT_LE(lo, r["output_throughput"].get<double>());
  EXPECT_GE(hi, r["output_throughput"].get<double>());

  // requests.jsonl: 3 warm-up + 2 runs x 6, each complete.
  const auto lines = lines_of(dir / "requests.jsonl");
  ASSERT_EQ(lines.size(), 15u);
  int measured = 0;
  for (const auto& line : lines) {
    const json q = json::parse(line);
    EXPECT_EQ(q["ok"], true);
    EXPECT_EQ(q["n_out"], 8);
    EXPECT_EQ(q["token_times_ns"].size(), 8u);
    EXPECT_LE(q["t_send_ns"].get<int64_t>(), q["t_first_ns"].get<int64_t>());
    if (!q["warmup"].get<bool>()) ++measured;
  }
  EXPECT_EQ(measured, 12);

  const auto csv = lines_of(dir / "summary.csv");
  ASSERT_EQ(csv.size(), 6u);  // header, 2 runs, median, cv, unstable
  EXPECT_EQ(csv[3].rfind("median,", 0), 0u);
  EXPECT_EQ(csv[4].rfind("cv,", 0), 0u);
  EXPECT_NE(out().find("| Output token throughput |"), std::string::npos) << out();
  EXPECT_NE(out().find("| TTFT p99 |"), std::string::npos);
}

TEST_F(E2e, BadInputExitsTwoWithOneLineAndLeavesNothing) {
  const fs::path dataset = root_ / "bad.jsonl";
  std::ofstream(dataset) << "{\"prompt\": \"fine\"}\nnot json\n";
  const fs::path taken = root_ / "taken";
  fs::create_directories(taken);
  std::ofstream(taken / "mine.txt") << "keep";
  const std::string dir = (root_ / "never").string();
  struct Case {
    std::vector<std::string> args;
    std::string expect;  // in the message
  };
  const std::vector<Case> cases = {
      {{"run", "--model", "no-such-model", "--result-dir", dir}, "no-such-model"},
      {{"run", "--model", testing::tiny_deepseek_v2_dir(root_ / "sigmoid", "sigmoid").string(),
        "--load-format", "dummy", "--result-dir", dir},
       "scoring_func 'sigmoid'"},
      {{"run", "--input-len", "1000", "--output-len", "100", "--result-dir", dir}, "1024"},
      {{"run", "--num-prompts", "0", "--result-dir", dir}, "--num-prompts"},
      {{"run", "--output-len", "-5", "--result-dir", dir}, "--output-len"},
      {{"run", "--dataset-name", "jsonl", "--dataset-path", dataset.string(), "--result-dir", dir},
       "bad.jsonl:2"},
      {{"run", "--dataset-name", "jsonl", "--dataset-path", "/nonexistent.jsonl", "--result-dir",
        dir},
       "/nonexistent.jsonl"},
      {{"run", "--num-prompts", "2", "--result-dir", taken.string()}, "--overwrite"},
      {{"run", "--no-such-flag", "--result-dir", dir}, "--no-such-flag"},
      {{"run", "--num-prompts", "many", "--result-dir", dir}, "many"},
      {{"run", "--quantization", "int3", "--result-dir", dir},
       "int3: not a quantization the "
       "engine runs; use none, fp8"},
      {{"run", "--kv-cache-dtype", "int8", "--result-dir", dir},
       "--kv-cache-dtype int8: not a KV-cache dtype the engine runs; use auto (the model dtype), "
       "fp8 or fp8_e4m3"},
      {{"run", "--block-sparse-attention", "local_blocks=4", "--result-dir", dir},
       "--block-sparse-attention local_blocks=4: local_blocks and vert_stride are both needed; "
       "give local_blocks=L,vert_stride=S[,block_size=B]"},
      {{"run", "--model", "mistral-7b-v0.1", "--block-sparse-attention",
        "local_blocks=4,vert_stride=2", "--result-dir", dir},
       "4096-token sliding window"},
      {{"run", "--model", "tiny-15m", "--tensor-parallel-size", "4", "--result-dir", dir},
       "--tensor-parallel-size 4: tiny-15m has 6 attention heads, which 4 does not divide; sizes "
       "that split it: 1, 2"},
  };
  for (const auto& c : cases) expect_refused(c.args, c.expect, dir);
  EXPECT_EQ(fs::directory_iterator(taken)->path().filename(), "mine.txt");
}

TEST_F(E2e, SigintKeepsFinishedRequestsAndMarksTheResultInterrupted) {
  const fs::path dir = root_ / "result";
  const pid_t pid =
      spawn({"run", "--model", "tiny-15m", "--num-prompts", "400", "--input-len", "8",
             "--output-len", "32", "--batch-size", "2", "--runs", "3", "--num-warmups", "0",
             "--result-dir", dir.string(), "--num-threads", "1"},
            root_ / "stdout.txt", root_ / "stderr.txt");
  // Wait until at least ten requests are on disk, then interrupt.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline &&
         (!fs::exists(dir / "requests.jsonl") || lines_of(dir / "requests.jsonl").size() < 10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  ASSERT_EQ(wait_exit(pid), 130) << err();
  EXPECT_NE(err().find("interrupted"), std::string::npos);

  const json r = json::parse(read_file(dir / "result.json").value());
  EXPECT_EQ(r["interrupted"], true);
  EXPECT_EQ(r["num_runs"], 0);
  EXPECT_TRUE(r.contains("partial_run"));
  const auto lines = lines_of(dir / "requests.jsonl");
  EXPECT_GE(lines.size(), 10u);
  EXPECT_LT(lines.size(), 400u);
  int ok = 0;
  for (const auto& line : lines) {
    const json q = json::parse(line);  // every line complete
    if (q["ok"].get<bool>()) {
      ++ok;
      EXPECT_EQ(q["n_out"], 32);
    } else {
      EXPECT_EQ(q["finish_reason"], "aborted");
    }
  }
  EXPECT_GE(ok, 10);
  EXPECT_EQ(r["partial_run"]["metrics"]["completed"], ok);
  EXPECT_FALSE(fs::exists(dir / "result.json.tmp"));
  EXPECT_NE(out().find("interrupted after 0 of 3 runs"), std::string::npos) << out();
}

TEST_F(E2e, EveryRequestFailingExitsOneAndKeepsTheRecords) {
  // Nothing listens on port 1 of the loopback: every request is refused.
  const fs::path dir = root_ / "refused";
  EXPECT_EQ(run({"run",
                 "--backend",
                 "openai",
                 "--base-url",
                 "http://127.0.0.1:1",
                 "--model",
                 "tiny-15m",
                 "--num-prompts",
                 "3",
                 "--runs",
                 "1",
                 "--num-warmups",
                 "0",
                 "--input-len",
                 "4",
                 "--output-len",
                 "2",
                 "--disable-telemetry",
                 "--result-dir",
                 dir.string()}),
            1)
      << err();
  EXPECT_NE(err().find("every measured request failed (first: connect"), std::string::npos)
      << err();
  const json r = json::parse(read_file(dir / "result.json").value());
  EXPECT_EQ(r["completed"], 0);
  EXPECT_EQ(r["failed"], 3);
  EXPECT_EQ(lines_of(dir / "requests.jsonl").size(), 3u);
}

// --quantization fp8 on the CPU: the run completes, result.json records it under vLLM's key and
// in the engine's settings, and the weights are the fp8 format's bytes.
TEST_F(E2e, Fp8QuantizationRunsOnTheCpuAndIsRecorded) {
  const fs::path dir = root_ / "result";
  ASSERT_EQ(run({"run", "--model", "tiny-15m", "--quantization", "fp8", "--num-prompts", "4",
                 "--input-len", "8", "--output-len", "4", "--batch-size", "2", "--runs", "1",
                 "--result-dir", dir.string(), "--num-threads", "2"}),
            0)
      << err();
  const json r = json::parse(read_file(dir / "result.json").value());
  EXPECT_EQ(r["completed"], 4);
  EXPECT_EQ(r["config"]["quantization"], "fp8");
  EXPECT_EQ(r["engine"]["engine"]["quantization"], "fp8");
  EXPECT_EQ(r["weights"],
            "dummy (seed 0), fp8 (W8A8 E4M3, per-channel weights, per-token dynamic activations)");
  // tiny-15m (dim 288, hidden 768, 6 layers, 6 heads, vocab 32000, tied): the embedding and the
  // norms in fp32, each layer's matmul weights at 1 byte per element and 4 per output row.
  const int64_t d = 288, f = 768, layers = 6, v = 32000;
  const int64_t matmul = 3 * d * d + d * d + 2 * f * d + d * f;
  const int64_t rows = 3 * d + d + 2 * f + d;
  const int64_t want = v * d * 4 + d * 4 + layers * (2 * d * 4 + matmul + 4 * rows);
  const int64_t weights = r["memory"]["engine-pools"]["weights_bytes"].get<int64_t>();
  EXPECT_GE(weights, want);
  EXPECT_LE(weights, want + 256 * (2 + 10 * layers));  // each tensor rounded up to 256 bytes
}

// --tensor-parallel-size 2 on the CPU: two ranks (threads), the run completes and result.json
// records the size, rank 0's shard and the group (communicator, each rank's device).
// The decode bytes count every rank's shard: about one rank's bytes at TP = 1 (the norms and
// each token's embedding row are read on every rank).
TEST_F(E2e, TensorParallelRunCompletesAndIsRecorded) {
  double decode_bytes[2] = {0, 0};
  for (int tp = 1; tp <= 2; ++tp) {
    const fs::path dir = root_ / ("tp" + std::to_string(tp));
    ASSERT_EQ(run({"run", "--model", "tiny-15m", "--tensor-parallel-size", std::to_string(tp),
                   "--num-prompts", "4", "--input-len", "8", "--output-len", "4", "--batch-size",
                   "2", "--runs", "1", "--result-dir", dir.string(), "--num-threads", "1"}),
              0)
        << err();
    const json r = json::parse(read_file(dir / "result.json").value());
    decode_bytes[tp - 1] = r["engine"]["performance"]["decode"]["bytes"].get<double>();
  }
  EXPECT_GT(decode_bytes[1], decode_bytes[0]);
  EXPECT_LT(decode_bytes[1], decode_bytes[0] * 1.01);
  const json r = json::parse(read_file(root_ / "tp2" / "result.json").value());
  EXPECT_EQ(r["completed"], 4);
  EXPECT_EQ(r["engine"]["engine"]["tensor_parallel_size"], 2);
  EXPECT_EQ(r["config"]["tensor_parallel_size"], 2);
  EXPECT_NE(r["engine"]["weights"].get<std::string>().find("tensor-parallel rank 0 of 2"),
            std::string::npos);
  // The group: its communicator and each rank's device (null at one rank).
  const json& group = r["engine"]["engine"]["tensor_parallel"];
  EXPECT_EQ(group["communicator"], "cpu threads, 2 ranks");
  ASSERT_EQ(group["ranks"].size(), 2u);
  EXPECT_EQ(group["ranks"][1]["rank"], 1);
  EXPECT_EQ(group["ranks"][1]["device"], "cpu:0");
  // Each rank's memory: its shard of the weights (about half of one rank's; the norms whole)
  // and its KV pool (half the KV heads: half the bytes of one rank's pool).
  const json one = json::parse(read_file(root_ / "tp1" / "result.json").value());
  const double whole_weights = one["memory"]["engine-pools"]["weights_bytes"].get<double>();
  for (int rank_index = 0; rank_index < 2; ++rank_index) {
    const json& rank = group["ranks"][rank_index];
    EXPECT_GT(rank["weights_bytes"].get<double>(), 0.45 * whole_weights) << rank.dump();
    EXPECT_LT(rank["weights_bytes"].get<double>(), 0.55 * whole_weights) << rank.dump();
    EXPECT_GT(rank["kv_cache_bytes"].get<double>(), 0) << rank.dump();
    EXPECT_GE(rank["peak_allocated_bytes"].get<double>(), rank["allocated_bytes"].get<double>());
  }
  EXPECT_EQ(group["ranks"][0]["kv_cache_bytes"], group["ranks"][1]["kv_cache_bytes"]);
  // The run's summary says the same (the last run's output: TP 2).
  EXPECT_NE(out().find("Tensor parallel: cpu threads, 2 ranks; rank 0 on cpu:0: weights "),
            std::string::npos)
      << out();
  EXPECT_NE(out().find("; rank 1 on cpu:0: weights "), std::string::npos) << out();
  // memory.csv: a demand series per rank (the heatmap's rows on a GPU), each rank's peak its
  // weights and more; none at one rank.
  const auto column_peak = [](const std::string& csv, const std::string& name) {
    std::istringstream in(csv);
    std::string line, cell;
    std::getline(in, line);
    std::istringstream header(line);
    int index = -1;
    for (int i = 0; std::getline(header, cell, ','); ++i)
      if (cell == name) index = i;
    double peak = -1;  // -1: no such column
    while (index >= 0 && std::getline(in, line)) {
      std::istringstream row(line);
      for (int i = 0; std::getline(row, cell, ','); ++i)
        if (i == index && !cell.empty()) peak = std::max(peak, std::stod(cell));
    }
    return peak;
  };
  const std::string tp2_csv = read_file(root_ / "tp2" / "memory.csv").value();
  for (int rank_index = 0; rank_index < 2; ++rank_index) {
    const std::string name = "rank" + std::to_string(rank_index) + "_demand_bytes";
    EXPECT_GE(column_peak(tp2_csv, name), group["ranks"][rank_index]["weights_bytes"].get<double>())
        << name;
  }
  EXPECT_EQ(column_peak(read_file(root_ / "tp1" / "memory.csv").value(), "rank0_demand_bytes"), -1);
  EXPECT_TRUE(one["engine"]["engine"]["tensor_parallel"].is_null());
}

// --kv-cache-dtype fp8 on the CPU: the run completes, result.json records vLLM's key and what
// the cache stores, and the same --kv-cache-memory holds 4x the tokens of the fp32 cache (2x
// bf16's on a GPU), up to whole blocks, shown under the table.
TEST_F(E2e, Fp8KvCacheRunsOnTheCpuHoldsMoreTokensAndIsRecorded) {
  int64_t tokens[2] = {0, 0};
  for (int fp8 = 0; fp8 < 2; ++fp8) {
    const fs::path dir = root_ / (fp8 ? "fp8" : "auto");
    ASSERT_EQ(run({"run",
                   "--model",
                   "tiny-15m",
                   "--kv-cache-dtype",
                   fp8 ? "fp8" : "auto",
                   "--kv-cache-memory",
                   "8MiB",
                   "--num-prompts",
                   "4",
                   "--input-len",
                   "8",
                   "--output-len",
                   "4",
                   "--batch-size",
                   "2",
                   "--runs",
                   "1",
                   "--result-dir",
                   dir.string(),
                   "--num-threads",
                   "2"}),
              0)
        << err();
    const json r = json::parse(read_file(dir / "result.json").value());
    EXPECT_EQ(r["completed"], 4);
    EXPECT_EQ(r["config"]["kv_cache_dtype"], fp8 ? json("fp8") : json(nullptr));
    EXPECT_EQ(r["engine"]["engine"]["kv_cache_dtype"], fp8 ? "fp8" : "auto");
    EXPECT_EQ(r["engine"]["engine"]["kv_dtype"], fp8 ? "fp8_e4m3" : "fp32");
    tokens[fp8] = r["engine"]["engine"]["kv_tokens"].get<int64_t>();
    EXPECT_NE(out().find("KV cache: " + std::to_string(tokens[fp8]) + " tokens"), std::string::npos)
        << out();
  }
  EXPECT_GT(tokens[0], 0);
  // Whole blocks of 16 tokens: floor(budget / (b / 4)) lies in [4 floor(budget / b), + 3].
  EXPECT_GE(tokens[1], 4 * tokens[0]);
  EXPECT_LE(tokens[1], 4 * tokens[0] + 3 * 16);
}

// --block-sparse-attention on the CPU: the run completes with prompts that cross several blocks,
// and result.json records the pattern in the run's config and the engine's settings.
TEST_F(E2e, BlockSparseAttentionRunsOnTheCpuAndIsRecorded) {
  const fs::path dir = root_ / "sparse";
  ASSERT_EQ(run({"run", "--model", "tiny-15m", "--block-sparse-attention",
                 "local_blocks=2,vert_stride=3,block_size=16", "--num-prompts", "4", "--input-len",
                 "100", "--output-len", "8", "--batch-size", "2", "--runs", "1", "--result-dir",
                 dir.string(), "--num-threads", "2"}),
            0)
      << err();
  const json r = json::parse(read_file(dir / "result.json").value());
  EXPECT_EQ(r["completed"], 4);
  EXPECT_EQ(r["config"]["block_sparse_attention"],
            json({{"block_size", 16}, {"local_blocks", 2}, {"vert_stride", 3}}));
  EXPECT_EQ(r["engine"]["engine"]["block_sparse_attention"],
            "local_blocks=2,vert_stride=3,block_size=16");
}

TEST_F(E2e, ModelsEnvAndPluginsCommands) {
  ASSERT_EQ(run({"models"}), 0) << err();
  EXPECT_NE(out().find("| llama-3.2-1b |"), std::string::npos);
  ASSERT_EQ(run({"env", "--json"}), 0) << err();
  const json env = json::parse(out());
  EXPECT_TRUE(env.contains("gpu"));
  EXPECT_GT(env["cpu"]["logical_cores"].get<int>(), 0);
  EXPECT_TRUE(env["ib_variables"].is_object());
  ::setenv("IB_PDL", "1", 1);
  ASSERT_EQ(run({"env"}), 0);
  ::unsetenv("IB_PDL");
  EXPECT_NE(out().find("inferbench"), std::string::npos);
  // Every kernel switch, with its value and where it came from.
  EXPECT_NE(out().find("IB_PDL                     1              (env)"), std::string::npos)
      << out();
  EXPECT_NE(out().find("IB_FUSED                   1              (default)"), std::string::npos)
      << out();
  ASSERT_EQ(run({"plugins"}), 0) << err();
  EXPECT_NE(out().find("| native |"), std::string::npos);
  EXPECT_EQ(run({}), 2);  // a subcommand is required
}

TEST_F(E2e, TokenizePrintsIdsAndCountAndRefusesUnsupportedFiles) {
  testing::write_two_merge_tokenizer(root_ / "tokenizer.json");
  ASSERT_EQ(run({"tokenize", "--model", root_.string(), "--text", "ab ab"}), 0) << err();
  EXPECT_EQ(out(), "ids: 0 5 5\ncount: 3\n");
  std::ofstream(root_ / "lines.txt") << "ab\na b\n";
  ASSERT_EQ(run({"tokenize", "--model", (root_ / "tokenizer.json").string(), "--file",
                 (root_ / "lines.txt").string(), "--lines"}),
            0)
      << err();
  EXPECT_EQ(out(),
            "{\"count\":2,\"decoded\":\"ab\",\"ids\":[0,5]}\n"
            "{\"count\":4,\"decoded\":\"a b\",\"ids\":[0,4,1,3]}\n");
  std::ofstream(root_ / "tokenizer.json") << R"({"model": {"type": "WordPiece", "vocab": {}}})";
  expect_refused({"tokenize", "--model", root_.string(), "--text", "x"},
                 "model type 'WordPiece' is not supported; inferbench reads BPE", root_ / "none");
  expect_refused({"tokenize", "--model", (root_ / "none").string(), "--text", "x"},
                 "not a directory with tokenizer.json", root_ / "none");
}

}  // namespace
}  // namespace ib
