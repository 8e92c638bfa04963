#include "suite/suite.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/fs.h"

namespace ib {
namespace {

using nlohmann::json;
using Args = std::vector<std::string>;

TEST(SuiteSpec, ExpandsModelsTimesDtypesTimesWorkloadsOverDefaults) {
  const auto spec = parse_suite_yaml(R"(
name: demo
defaults: {device: cpu, runs: 2, num_prompts: 4, disable_telemetry: true}
entries:
  - model: tiny-15m
  - models: [tiny-15m, tiny-60m]
    dtypes: [fp32, auto]
    runs: 1
    workloads:
      - {name: short, input_len: 8, output_len: 4}
      - {name: long, input_len: 64}
)",
                                     "demo.yaml");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->name, "demo");
  ASSERT_EQ(spec->entries.size(), 1u + 2 * 2 * 2);
  EXPECT_EQ(spec->entries[0].name, "tiny-15m");
  EXPECT_EQ(spec->entries[0].args, (Args{"--device", "cpu", "--runs", "2", "--num-prompts", "4",
                                         "--disable-telemetry", "--model", "tiny-15m"}));
  const SuiteEntry& e = spec->entries[1];
  EXPECT_EQ(e.name, "tiny-15m-short-fp32");
  EXPECT_EQ(e.model, "tiny-15m");
  EXPECT_EQ(e.dtype, "fp32");
  EXPECT_EQ(e.workload, "short");
  // Entry flags override defaults in place; the workload's follow; model and dtype last.
  EXPECT_EQ(e.args, (Args{"--device", "cpu", "--runs", "1", "--num-prompts", "4",
                          "--disable-telemetry", "--input-len", "8", "--output-len", "4", "--model",
                          "tiny-15m", "--dtype", "fp32"}));
  EXPECT_EQ(spec->entries[4].name, "tiny-15m-long-auto");
  EXPECT_EQ(spec->entries.back().name, "tiny-60m-long-auto");
  EXPECT_FALSE(spec->entries[0].allow_failure);
  const auto lenient = parse_suite_yaml(
      "defaults: {allow_failure: true}\nentries:\n  - model: a\n"
      "  - {model: b, allow_failure: false}\n",
      "l.yaml");
  ASSERT_TRUE(lenient.ok()) << lenient.error().message;
  EXPECT_TRUE(lenient->entries[0].allow_failure);
  EXPECT_FALSE(lenient->entries[1].allow_failure);
  EXPECT_EQ(lenient->entries[0].args, (Args{"--model", "a"}));  // not a run flag
}

TEST(SuiteSpec, FalseOmitsAFlagAndNamedEntriesKeepTheirName) {
  const auto spec = parse_suite_yaml(R"(
defaults: {disable_telemetry: true, model: tiny-15m}
entries:
  - {name: with-telemetry, disable_telemetry: false}
)",
                                     "x.yaml");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  ASSERT_EQ(spec->entries.size(), 1u);
  EXPECT_EQ(spec->name, "x");
  EXPECT_EQ(spec->entries[0].name, "with-telemetry");
  EXPECT_EQ(spec->entries[0].args, (Args{"--model", "tiny-15m"}));
}

TEST(SuiteSpec, BadFilesAreUserErrorsNamingTheProblem) {
  struct Case {
    std::string yaml;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"entries: [", "not valid YAML"},
      {"name: x\n", "'entries' list"},
      {"entries: []\n", "empty"},
      {"entries:\n  - {runs: 2}\n", "entry 1: no model"},
      {"entries:\n  - {model: a, models: [b]}\n", "not both"},
      {"entries:\n  - {model: a, result_dir: /tmp/x}\n", "set by the suite"},
      {"entries:\n  - {model: a, runs: [1, 2]}\n", "single value"},
      {"entries:\n  - model: a\n  - model: a\n", "names collide (a)"},
      {"entry: []\nentries: [{model: a}]\n", "unknown top-level key 'entry'"},
  };
  for (const auto& c : cases) {
    const auto spec = parse_suite_yaml(c.yaml, "bad.yaml");
    ASSERT_FALSE(spec.ok()) << c.yaml;
    EXPECT_EQ(spec.error().kind, ErrorKind::kUser);
    EXPECT_NE(spec.error().message.find(c.expect), std::string::npos) << spec.error().message;
  }
}

// eval: true runs eval with its defaults, a map adds eval flags, false (or no key) runs none; the
// defaults' eval applies to every entry that does not say otherwise; flags the run decides are
// refused.
TEST(SuiteSpec, EvalKeyGivesEvalFlagsApartFromTheRunFlags) {
  const auto spec = parse_suite_yaml(R"(
defaults: {model: m, runs: 1, eval: {reference_dtype: bf16, num_prompts: 2}}
entries:
  - {name: inherit}
  - {name: own, eval: {text: t.txt, ctx_size: 64}}
  - {name: plain, eval: true}
  - {name: none, eval: false}
)",
                                     "e.yaml");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  ASSERT_EQ(spec->entries.size(), 4u);
  EXPECT_EQ(spec->entries[0].eval_args, (Args{"--reference-dtype", "bf16", "--num-prompts", "2"}));
  // eval is not a run flag
  EXPECT_EQ(spec->entries[0].args, (Args{"--model", "m", "--runs", "1"}));
  EXPECT_EQ(spec->entries[1].eval_args, (Args{"--text", "t.txt", "--ctx-size", "64"}));
  EXPECT_EQ(spec->entries[2].eval_args, Args{});
  EXPECT_FALSE(spec->entries[3].eval_args.has_value());
  const std::vector<std::pair<std::string, std::string>> bad_cases = {
      {"entries:\n  - {model: a, eval: {quantization: fp8}}\n",
       "eval: quantization comes from the entry's run flags"},
      {"entries:\n  - {model: a, eval: [1]}\n", "eval is true, false or a map"},
      {"entries:\n  - {model: a, eval: {text: [a, b]}}\n", "single value"}};
  for (const auto& [yaml, expect] : bad_cases) {
    const auto bad = parse_suite_yaml(yaml, "bad.yaml");
    ASSERT_FALSE(bad.ok()) << yaml;
    EXPECT_NE(bad.error().message.find(expect), std::string::npos) << bad.error().message;
  }
}

TEST(SuiteSpec, ModelListKeepsListedModelsAndRefusesUnknownOnes) {
  const auto spec = parse_suite_yaml("entries:\n  - models: [m1, m2, m3]\n", "s.yaml");
  ASSERT_TRUE(spec.ok());
  const auto some = select_models(spec->entries, "m3,m1");
  ASSERT_TRUE(some.ok());
  ASSERT_EQ(some->size(), 2u);
  EXPECT_EQ((*some)[0].model, "m1");  // file order
  EXPECT_EQ((*some)[1].model, "m3");
  const auto bad = select_models(spec->entries, "m1,nope");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("nope not in the suite; its models are: m1, m2, m3"),
            std::string::npos)
      << bad.error().message;
}

TEST(SuiteSpec, OverrideReplacesAFlagInEveryEntry) {
  auto spec = parse_suite_yaml(
      "defaults: {runs: 3, disable_telemetry: true}\nentries:\n  - models: [m1, m2]\n", "s.yaml");
  ASSERT_TRUE(spec.ok());
  auto entries = spec->entries;
  ASSERT_TRUE(apply_override(entries, "runs=1").ok());
  ASSERT_TRUE(apply_override(entries, "disable_telemetry=").ok());
  ASSERT_TRUE(apply_override(entries, "num_prompts=16").ok());
  for (const auto& e : entries) {
    EXPECT_EQ(e.args, (Args{"--model", e.model, "--runs", "1", "--disable-telemetry",
                            "--num-prompts", "16"}));
  }
  EXPECT_FALSE(apply_override(entries, "runs").ok());
  EXPECT_FALSE(apply_override(entries, "result_dir=/tmp/x").ok());
}

// A suite file's relative dataset_path, eval text and lora_modules paths are relative to the
// file, absolute ones stay.
TEST(SuiteSpec, RelativeFilePathsAreRelativeToTheSuiteFile) {
  const auto dir = std::filesystem::temp_directory_path() / "ib_suite_paths_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "sub");
  const auto file = dir / "sub" / "s.yaml";
  ASSERT_TRUE(write_file_atomic(file, R"(
entries:
  - {name: rel, model: m, dataset_path: p.jsonl, eval: {text: ../t.txt, dataset_path: p.jsonl}}
  - {name: abs, model: m, dataset_path: /data/p.jsonl}
  - {name: lora, model: m, lora_modules: "a=ad/a,b=/abs/b"}
  - {name: ckpt, model: ckpt}
)")
                  .ok());
  std::filesystem::create_directories(dir / "sub" / "ckpt");  // a checkpoint beside the file
  const auto spec = load_suite_file(file);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  const std::string sub = (dir / "sub").string();
  EXPECT_EQ(spec->entries[0].args, (Args{"--dataset-path", sub + "/p.jsonl", "--model", "m"}));
  EXPECT_EQ(spec->entries[0].eval_args,
            (Args{"--text", (dir / "t.txt").string(), "--dataset-path", sub + "/p.jsonl"}));
  EXPECT_EQ(spec->entries[1].args, (Args{"--dataset-path", "/data/p.jsonl", "--model", "m"}));
  // --lora-modules' name=path items: each relative path too.
  EXPECT_EQ(spec->entries[2].args,
            (Args{"--lora-modules", "a=" + sub + "/ad/a,b=/abs/b", "--model", "m"}));
  // --model: a directory beside the suite file is resolved; a name that is none (m) stays.
  EXPECT_EQ(spec->entries[3].args, (Args{"--model", sub + "/ckpt"}));
  std::filesystem::remove_all(dir);
}

TEST(SuiteState, RoundTripsAndSkipsOnlyEntriesFinishedWithTheSameArgs) {
  const auto dir = std::filesystem::temp_directory_path() / "ib_suite_state_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  SuiteEntry a{"a", "m", "", "", {"--model", "m"}};
  SuiteEntry b{"b", "m", "", "", {"--model", "m", "--runs", "1"}};
  SuiteState state("demo");
  state.record("a", {"ok", "", a.args, 1.5});
  state.record("b", {"failed", "out of memory", b.args, 0.5});
  ASSERT_TRUE(state.save(dir).ok());
  const auto loaded = SuiteState::load(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->suite_name(), "demo");
  EXPECT_TRUE(loaded->done(a));
  EXPECT_TRUE(loaded->done(b));
  EXPECT_EQ(loaded->find("b")->error, "out of memory");
  b.args.back() = "2";  // the suite file changed: rerun
  EXPECT_FALSE(loaded->done(b));
  a.eval_args = Args{"--num-prompts", "2"};  // eval added to a finished entry: rerun
  EXPECT_FALSE(loaded->done(a));
  SuiteState with_eval("demo");
  with_eval.record("a", {"ok", "", a.args, 1.5, a.eval_args});
  ASSERT_TRUE(with_eval.save(dir).ok());
  EXPECT_TRUE(SuiteState::load(dir)->done(a));
  EXPECT_FALSE(loaded->done(SuiteEntry{"c", "m", "", "", {}}));
  ASSERT_TRUE(write_file_atomic(dir / kSuiteStateJson, "{\"entries\": 3}").ok());
  EXPECT_FALSE(SuiteState::load(dir).ok());
  std::filesystem::remove_all(dir);
}

TEST(SuiteState, RetryFailedRerunsOnlyFailedEntries) {
  SuiteEntry a{"a", "m", "", "", {"--model", "m"}};
  SuiteEntry b{"b", "m", "", "", {"--model", "m", "--runs", "1"}};
  SuiteState state("demo");
  state.record("a", {"ok", "", a.args, 1.5});
  state.record("b", {"failed", "no dataset", b.args, 0.5});
  EXPECT_TRUE(state.done(a, true));
  EXPECT_FALSE(state.done(b, true));
  EXPECT_TRUE(state.done(b, false));
}

TEST(SuiteState, EntryStatesRoundTripBesideTheResult) {
  const auto dir = std::filesystem::temp_directory_path() / "ib_entry_state_test";
  std::filesystem::remove_all(dir);
  const auto none = load_entry_state(dir, "a");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(save_entry_state(dir, "a", {"failed", "boom", {"--model", "m"}, 2.5}).ok());
  const auto got = load_entry_state(dir, "a");
  ASSERT_TRUE(got.ok()) << got.error().message;
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->status, "failed");
  EXPECT_EQ((*got)->error, "boom");
  EXPECT_EQ((*got)->args, (Args{"--model", "m"}));
  EXPECT_DOUBLE_EQ((*got)->wall_s, 2.5);
  // Another entry's file, or no entry state at all, is refused naming the file.
  std::filesystem::create_directories(dir / "b");
  std::filesystem::copy_file(dir / "a" / kEntryStateJson, dir / "b" / kEntryStateJson);
  const auto wrong = load_entry_state(dir, "b");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("entry-state.json"), std::string::npos);
  ASSERT_TRUE(write_file_atomic(dir / "a" / kEntryStateJson, "[1, 2]").ok());
  EXPECT_FALSE(load_entry_state(dir, "a").ok());
  std::filesystem::remove_all(dir);
}

TEST(Leaderboard, RanksByOutputThroughputAndRecordsFailures) {
  const SuiteEntry slow{"slow", "m-slow", "", "", {}};
  const SuiteEntry fast{"fast", "m-fast", "bf16", "", {}};
  const SuiteEntry broken{"broken", "m-big", "", "", {}};
  const EntryState ok{"ok", "", {}, 1};
  const EntryState failed{"failed", "CUDA out of memory", {}, 1};
  const json slow_result = {
      {"output_throughput", 100.0},
      {"median_ttft_ms", 5.0},
      {"p99_ttft_ms", 9.0},
      {"config", {{"dtype", "fp32"}, {"tensor_parallel_size", 2}}},
      {"memory",
       {{"peaks",
         {{"rss_bytes", 2147483648.0},
          {"rank0_demand_bytes", 268435456.0},
          {"rank1_demand_bytes", 805306368.0}}}}},
      {"energy", {{"available", false}}},
      {"engine",
       {{"performance",
         {{"copy_ceiling_bytes_per_s", 0.0}, {"decode", {{"fraction_of_copy_ceiling", 0.0}}}}},
        {"engine", {{"kv_bytes_per_token", 32768.0}, {"kv_bytes_per_token_gqa", 32768.0}}}}}};
  const json fast_result = {
      {"output_throughput", 250.5},
      {"median_ttft_ms", 2.0},
      {"p99_ttft_ms", 3.0},
      {"memory",
       {{"peaks",
         {{"gpus_used_bytes", 1073741824.0},
          {"rss_bytes", 1.0},
          {"engine_demand_bytes", 536870912.0}}}}},
      {"energy", {{"available", true}, {"output_tokens_per_joule", 4.25}}},
      {"engine",
       {{"performance",
         {{"copy_ceiling_bytes_per_s", 4e12}, {"decode", {{"fraction_of_copy_ceiling", 0.8}}}}},
        // a latent KV cache (DeepSeek-V2-Lite's): its bytes beside ordinary attention's
        {"engine", {{"kv_bytes_per_token", 31104.0}, {"kv_bytes_per_token_gqa", 276480.0}}}}},
      {"stability", {{"cv_threshold", 0.05}, {"unstable_metrics", {"output_throughput"}}}}};
  const json fast_eval = {{"kl_mean", 0.0123},
                          {"kl_p99", 0.25},
                          {"top1_agreement", 0.975},
                          {"perplexity", {{"candidate", 6.25}, {"reference", 6.125}}}};
  std::vector<LeaderboardRow> rows = {
      leaderboard_row(slow, &ok, slow_result, nullptr, 15'000'000),  // CPU: no copy ceiling
      leaderboard_row(broken, &failed, nullptr, nullptr, 70'000'000'000),
      leaderboard_row(fast, &ok, fast_result, fast_eval, 8'000'000'000),
      leaderboard_row(
          SuiteEntry{"later", "m", "bf16", "", {"--model", "m", "--quantization", "awq"}}, nullptr,
          nullptr, nullptr, 0)};
  rank_rows(rows);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].entry, "fast");
  EXPECT_EQ(rows[1].entry, "slow");
  EXPECT_EQ(rows[2].entry, "broken");
  EXPECT_EQ(rows[3].status, "pending");
  EXPECT_EQ(rows[3].precision, "awq");  // the entry's --quantization, not its dtype
  EXPECT_EQ(rows[0].peak_source, "gpu");
  EXPECT_DOUBLE_EQ(*rows[0].peak_gib, 1.0);
  EXPECT_DOUBLE_EQ(*rows[0].engine_peak_gib, 0.5);   // the engine's demand, apart from NVML
  EXPECT_DOUBLE_EQ(*rows[1].engine_peak_gib, 0.75);  // TP 2: the larger rank's demand
  EXPECT_DOUBLE_EQ(*rows[1].peak_gib, 2.0);
  EXPECT_EQ(rows[1].precision, "fp32, TP 2");  // two tensor-parallel ranks
  EXPECT_FALSE(rows[1].tokens_per_joule.has_value());
  EXPECT_FALSE(rows[1].bandwidth_share.has_value());
  EXPECT_EQ(rows[0].status, "ok, unstable (CV > 5%: output_throughput)");

  const std::string md = leaderboard_markdown(rows, "demo");
  EXPECT_NE(
      md.find("| 1 | fast | m-fast | 8.00B | bf16 | 250.5 | 2.00 | 3.00 | 0.50 | 30.4 KiB (GQA "
              "270.0 KiB) | 1.00 (gpu) | 4.25 | 80.0% | 0.0123 | 0.25 | 97.5% | 6.250 (6.125) |"),
      std::string::npos)
      << md;
  EXPECT_NE(md.find("| 2 | slow | m-slow | 15.0M | fp32, TP 2 | 100.0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 0.75 | 32.0 KiB | 2.00 (rss) |"), std::string::npos) << md;  // GQA: one
  // Not measured: "-" in the eval columns.
  EXPECT_NE(md.find("| - | broken | m-big | 70.00B |  |  |  |  |  |  |  |  |  | - | - | - | - | "
                    "failed: CUDA out of memory |"),
            std::string::npos)
      << md;
  const std::string csv = leaderboard_csv(rows);
  EXPECT_NE(csv.find("\n1,fast,m-fast,8000000000,bf16,250.5,2,3,0.5,31104,276480,1,gpu,4.25,0.8,"
                     "0.0123,0.25,0.975,6.25,6.125,"),
            std::string::npos)
      << csv;
  EXPECT_NE(csv.find("\n,broken,m-big,70000000000,,,,,,,,,,,,,,,,,failed: CUDA out of memory\n"),
            std::string::npos)
      << csv;
  const std::string html = leaderboard_html(rows, "demo <1>", "<svg id=\"h\"></svg>");
  EXPECT_NE(html.find("<h1>demo &lt;1&gt;</h1>"), std::string::npos);
  EXPECT_NE(html.find("<tr class=\"failed\">"), std::string::npos);
  EXPECT_NE(html.find("<svg id=\"h\"></svg>"), std::string::npos);
}

}  // namespace
}  // namespace ib
