// End-to-end tests of `inferbench suite`, `inferbench compare` and `inferbench run --from` on the
// real binary with tiny-15m and very small workloads.
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/detail/e2e_support.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::E2e;
using testing::lines_of;

const std::vector<std::string> kSmall = {"--num-prompts", "4", "--input-len",   "8",
                                         "--output-len",  "4", "--batch-size",  "2",
                                         "--num-threads", "2", "--num-warmups", "1"};

std::vector<std::string> with_small(std::vector<std::string> args) {
  args.insert(args.end(), kSmall.begin(), kSmall.end());
  return args;
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
}

std::vector<int> n_out_of(const fs::path& requests) {
  std::vector<int> out;
  for (const auto& line : lines_of(requests)) {
    const json q = json::parse(line);
    if (!q["warmup"].get<bool>()) out.push_back(q["n_out"].get<int>());
  }
  return out;
}

TEST_F(E2e, SuiteRunsEntriesRecordsFailuresWritesLeaderboardAndResumes) {
  const fs::path yaml = root_ / "s.yaml";
  write(yaml, R"(name: tiny
defaults: {num_prompts: 2, input_len: 8, output_len: 4, batch_size: 2, runs: 2,
           num_threads: 2, num_warmups: 1, memory_sample_interval: 5}
entries:
  - model: tiny-15m
  - {name: starved, model: tiny-15m, kv_cache_memory: 1KiB, disable_telemetry: true}
)");
  const fs::path dir = root_ / "suite";
  ASSERT_EQ(run({"suite", yaml.string(), "--result-dir", dir.string()}), 1) << err();
  EXPECT_NE(err().find("suite entry 1/2 tiny-15m: running"), std::string::npos) << err();
  EXPECT_NE(err().find("suite entry 2/2 starved failed: "), std::string::npos) << err();
  EXPECT_TRUE(fs::exists(dir / "tiny-15m" / "result.json"));
  EXPECT_FALSE(fs::exists(dir / "starved" / "result.json"));
  for (const char* f : {"leaderboard.md", "leaderboard.csv", "leaderboard.html", "heatmap.svg",
                        "suite-state.json"}) {
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  }
  const std::string md = read_file(dir / "leaderboard.md").value();
  EXPECT_NE(out().find(md), std::string::npos);  // also on stdout
  EXPECT_NE(md.find("| 1 | tiny-15m | tiny-15m | "), std::string::npos) << md;
  EXPECT_NE(md.find("| - | starved | tiny-15m |"), std::string::npos) << md;
  EXPECT_NE(md.find("failed: "), std::string::npos) << md;
  const auto csv = lines_of(dir / "leaderboard.csv");
  ASSERT_EQ(csv.size(), 3u);
  EXPECT_EQ(csv[1].rfind("1,tiny-15m,tiny-15m,", 0), 0u) << csv[1];
  const json state = json::parse(read_file(dir / "suite-state.json").value());
  ASSERT_EQ(state["entries"].size(), 2u);
  EXPECT_EQ(state["entries"][0]["status"], "ok");
  EXPECT_EQ(state["entries"][1]["status"], "failed");

  // Rerun: the directory holds a state, so the suite resumes and skips both entries.
  const auto mtime = fs::last_write_time(dir / "tiny-15m" / "result.json");
  ASSERT_EQ(run({"suite", yaml.string(), "--result-dir", dir.string()}), 1) << err();
  EXPECT_NE(err().find("1/2 tiny-15m: ok earlier, skipped"), std::string::npos) << err();
  EXPECT_NE(err().find("2/2 starved: failed earlier, skipped"), std::string::npos) << err();
  EXPECT_EQ(fs::last_write_time(dir / "tiny-15m" / "result.json"), mtime);

  // --model-list picks entries by model; an unknown model is refused.
  ASSERT_EQ(run({"suite", yaml.string(), "--result-dir", dir.string(), "--model-list", "gpt-9"}),
            2);
  EXPECT_NE(err().find("gpt-9 not in the suite; its models are: tiny-15m"), std::string::npos)
      << err();
}

TEST_F(E2e, PartialSuiteResumesWithTheRestAndSuitesCompareEntryByEntry) {
  const fs::path yaml = root_ / "two.yaml";
  write(yaml, R"(defaults: {num_prompts: 2, input_len: 8, output_len: 4, batch_size: 2, runs: 2,
           num_threads: 2, num_warmups: 1, disable_telemetry: true}
entries:
  - models: [tiny-15m, tiny-110m]
)");
  const fs::path dir = root_ / "a";
  ASSERT_EQ(run({"suite", yaml.string(), "--result-dir", dir.string(), "--model-list", "tiny-15m"}),
            0)
      << err();
  EXPECT_EQ(lines_of(dir / "leaderboard.csv").size(), 2u);
  EXPECT_FALSE(fs::exists(dir / "tiny-110m"));
  // --report-only rebuilds the leaderboard of every entry from what is on disk, running nothing:
  // the unfinished one is listed as pending.
  fs::remove(dir / "leaderboard.md");
  ASSERT_EQ(run({"suite", yaml.string(), "--result-dir", dir.string(), "--report-only"}), 0)
      << err();
  EXPECT_FALSE(fs::exists(dir / "tiny-110m"));
  const std::string board = read_file(dir / "leaderboard.md").value();
  EXPECT_NE(board.find("| tiny-15m"), std::string::npos) << board;
  EXPECT_NE(board.find("pending"), std::string::npos) << board;
  EXPECT_EQ(
      run({"suite", yaml.string(), "--result-dir", (root_ / "none").string(), "--report-only"}), 2);
  EXPECT_NE(err().find("--report-only:"), std::string::npos) << err();
  ASSERT_EQ(run({"suite", yaml.string(), "--result-dir", dir.string(), "--resume"}), 0) << err();
  EXPECT_NE(err().find("1/2 tiny-15m: ok earlier, skipped"), std::string::npos) << err();
  EXPECT_NE(err().find("2/2 tiny-110m: running"), std::string::npos) << err();
  EXPECT_EQ(lines_of(dir / "leaderboard.csv").size(), 3u);

  // --override appends a flag to every entry (recorded in the state, so a resume would rerun).
  const fs::path other = root_ / "b";
  ASSERT_EQ(run({"suite", yaml.string(), "--result-dir", other.string(), "--override", "seed=3"}),
            0)
      << err();
  const json state = json::parse(read_file(other / "suite-state.json").value());
  const auto args = state["entries"][0]["args"].get<std::vector<std::string>>();
  ASSERT_GE(args.size(), 2u);
  EXPECT_EQ(args[args.size() - 2], "--seed");
  EXPECT_EQ(json::parse(read_file(other / "tiny-15m" / "result.json").value())["config"]["seed"],
            3);
  // --report-only without that --override: the entries ran with other flags, and say so (not
  // "pending"); with it, they are the entries' rows again.
  ASSERT_EQ(run({"suite", yaml.string(), "--result-dir", other.string(), "--report-only"}), 0)
      << err();
  const std::string stale = read_file(other / "leaderboard.md").value();
  EXPECT_NE(stale.find("ran with other flags"), std::string::npos) << stale;
  EXPECT_EQ(stale.find("pending"), std::string::npos) << stale;
  ASSERT_EQ(run({"suite", yaml.string(), "--result-dir", other.string(), "--report-only",
                 "--override", "seed=3"}),
            0)
      << err();
  EXPECT_EQ(read_file(other / "leaderboard.md").value().find("other flags"), std::string::npos);

  // Two suites: entry by entry (a huge threshold: CPU noise must not decide the exit code).
  ASSERT_EQ(run({"compare", dir.string(), other.string(), "--threshold", "1000%"}), 0) << err();
  EXPECT_NE(out().find(fmt::format("{}/tiny-110m → {}/tiny-110m", dir.string(), other.string())),
            std::string::npos)
      << out();
  EXPECT_NE(out().find(fmt::format("{}/tiny-15m → {}/tiny-15m", dir.string(), other.string())),
            std::string::npos)
      << out();
  EXPECT_EQ(run({"compare", dir.string(), (other / "tiny-15m").string()}), 2);
}

TEST_F(E2e, SuiteRefusesIncompatibleEntriesTogetherBeforeRunning) {
  const fs::path yaml = root_ / "bad.yaml";
  write(yaml, R"(defaults: {num_prompts: 2, input_len: 8, output_len: 4}
entries:
  - model: tiny-15m
  - model: no-such-model
  - {model: tiny-15m, name: half, dtype: bf16}
  - {model: tiny-15m, name: long, input_len: 100000}
  - {model: tiny-15m, name: typo, batch_sise: 3}
)");
  const fs::path dir = root_ / "never";
  ASSERT_EQ(run({"suite", yaml.string(), "--result-dir", dir.string()}), 2);
  const std::string e = err();
  EXPECT_NE(e.find("suite entry no-such-model: "), std::string::npos) << e;
  EXPECT_NE(e.find("suite entry half: --dtype bf16"), std::string::npos) << e;
  EXPECT_NE(e.find("suite entry long: "), std::string::npos) << e;
  EXPECT_NE(e.find("suite entry typo: "), std::string::npos) << e;
  EXPECT_NE(e.find("4 of 5 suite entries cannot run"), std::string::npos) << e;
  EXPECT_EQ(e.find("suite entry tiny-15m"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir));
  ASSERT_EQ(run({"suite", yaml.string(), "--result-dir", dir.string(), "--resume"}), 2);
  EXPECT_NE(err().find("no suite-state.json"), std::string::npos) << err();

  // allow_failure: an unsupported model is recorded as not run and the suite goes on (exit 0).
  const fs::path sigmoid = testing::tiny_deepseek_v2_dir(root_ / "ds-sigmoid", "sigmoid");
  const fs::path lenient = root_ / "lenient.yaml";
  write(lenient, R"(defaults: {num_prompts: 2, input_len: 8, output_len: 4, batch_size: 2, runs: 1,
           num_threads: 2, num_warmups: 1, disable_telemetry: true}
entries:
  - model: tiny-15m
  - {model: )" + sigmoid.string() +
                     R"(, name: ds-sigmoid, allow_failure: true}
)");
  ASSERT_EQ(run({"suite", lenient.string(), "--result-dir", dir.string()}), 0) << err();
  const std::string md = read_file(dir / "leaderboard.md").value();
  EXPECT_NE(md.find("| 1 | tiny-15m |"), std::string::npos) << md;
  EXPECT_NE(md.find("| - | ds-sigmoid |"), std::string::npos) << md;
  EXPECT_NE(md.find("failed: not run: model '"), std::string::npos) << md;
  EXPECT_NE(md.find("(deepseek_v2) needs router scoring_func 'sigmoid'"), std::string::npos) << md;
}

TEST_F(E2e, RunFromRerunsTheRecordedConfiguration) {
  const fs::path first = root_ / "first";
  ASSERT_EQ(run(with_small({"run", "--model", "tiny-15m", "--seed", "7", "--runs", "1",
                            "--input-len-dist", "uniform:min=4,max=12", "--result-dir",
                            first.string(), "--disable-telemetry"})),
            0)
      << err();
  const fs::path second = root_ / "second";
  ASSERT_EQ(
      run({"run", "--from", (first / "result.json").string(), "--result-dir", second.string()}), 0)
      << err();
  json a = json::parse(read_file(first / "result.json").value());
  json b = json::parse(read_file(second / "result.json").value());
  EXPECT_EQ(b["config"]["result_dir"], second.string());
  a["config"].erase("result_dir");
  b["config"].erase("result_dir");
  EXPECT_EQ(a["config"], b["config"]);
  EXPECT_EQ(a["total_input_tokens"], b["total_input_tokens"]);
  EXPECT_EQ(a["total_output_tokens"], b["total_output_tokens"]);
  EXPECT_EQ(n_out_of(first / "requests.jsonl"), n_out_of(second / "requests.jsonl"));

  // Flags after --from override the record; a directory works as well as its result.json.
  const fs::path third = root_ / "third";
  ASSERT_EQ(run({"run", "--from", first.string(), "--runs", "2", "--result-dir", third.string()}),
            0)
      << err();
  const json c = json::parse(read_file(third / "result.json").value());
  EXPECT_EQ(c["config"]["runs"], 2);
  EXPECT_EQ(c["config"]["seed"], 7);

  // Recorded by another build: rerun with a warning naming both.
  json old = json::parse(read_file(first / "result.json").value());
  old["env"]["inferbench"]["git_sha"] = "0123abc";
  write(root_ / "old.json", old.dump());
  ASSERT_EQ(run({"run", "--from", (root_ / "old.json").string(), "--result-dir",
                 (root_ / "fourth").string()}),
            0)
      << err();
  EXPECT_NE(err().find("warning: " + (root_ / "old.json").string() + " was recorded by inferbench"),
            std::string::npos)
      << err();
  EXPECT_NE(err().find("(git 0123abc)"), std::string::npos) << err();

  write(root_ / "junk.json", "{\"date\": 1}");
  ASSERT_EQ(run({"run", "--from", (root_ / "junk.json").string()}), 2);
  EXPECT_NE(err().find("not an inferbench result.json"), std::string::npos) << err();
  EXPECT_EQ(lines_of(root_ / "stderr.txt").size(), 1u) << err();
}

json crafted(const std::vector<double>& tput, const std::vector<double>& ttft, int input_len) {
  return json{
      {"config",
       {{"model", "tiny-15m"},
        {"input_len", std::to_string(input_len)},
        {"num_prompts", 200},
        {"device", "cpu"}}},
      {"spread",
       {{"output_throughput", {{"per_run", tput}}}, {"median_ttft_ms", {{"per_run", ttft}}}}}};
}

TEST_F(E2e, CompareExitCodes) {
  const auto put = [&](const std::string& name, const json& j) {
    fs::create_directories(root_ / name);
    write(root_ / name / "result.json", j.dump());
    return (root_ / name).string();
  };
  const std::string base = put("base", crafted({100, 101, 99}, {10, 10.1, 9.9}, 32));
  const std::string same = put("same", crafted({100.5, 99.5, 100}, {10, 10.05, 9.95}, 32));
  const std::string slower = put("slower", crafted({90, 91, 89}, {10, 10.1, 9.9}, 32));
  const std::string other = put("other", crafted({100, 101, 99}, {10, 10.1, 9.9}, 64));

  const fs::path md = root_ / "cmp.md";
  EXPECT_EQ(run({"compare", base, same, "--markdown", md.string()}), 0) << err();
  EXPECT_NE(out().find("No significant regression."), std::string::npos) << out();
  EXPECT_EQ(read_file(md).value(), out());

  const fs::path js = root_ / "cmp.json";
  EXPECT_EQ(run({"compare", base, slower + "/result.json", "--json", js.string()}), 1) << err();
  EXPECT_NE(out().find("REGRESSION"), std::string::npos) << out();
  const json j = json::parse(read_file(js).value());
  EXPECT_EQ(j["regressions"], 1);
  EXPECT_EQ(j["metrics"][0]["key"], "output_throughput");
  EXPECT_TRUE(j["metrics"][0]["regression"].get<bool>());
  // A 10% drop is within a 15% threshold.
  EXPECT_EQ(run({"compare", base, slower, "--threshold", "15%"}), 0) << err();

  EXPECT_EQ(run({"compare", base, other}), 2);
  EXPECT_NE(err().find("different workloads (input_len: \"32\" vs \"64\")"), std::string::npos)
      << err();
  EXPECT_EQ(run({"compare", base, other, "--force"}), 0) << err();
  EXPECT_EQ(run({"compare", base, (root_ / "missing").string()}), 2);
  EXPECT_EQ(run({"compare", base, same, "--threshold", "lots"}), 2);
}

TEST_F(E2e, CompareLabelsAndRefusesDifferentKernelSwitches) {
  const auto put = [&](const std::string& name, const json& j) {
    fs::create_directories(root_ / name);
    write(root_ / name / "result.json", j.dump());
    return (root_ / name).string();
  };
  json a = crafted({100, 101, 99}, {10, 10.1, 9.9}, 32);
  const std::string old = put("old", a);  // written before switches were recorded
  a["kernel_switches"] = {{"IB_PDL", {{"value", "0"}, {"source", "default"}, {"applies", true}}}};
  json b = a;
  b["kernel_switches"]["IB_PDL"] = {{"value", "1"}, {"source", "env"}, {"applies", true}};
  const std::string pa = put("pdl-off", a);
  const std::string pb = put("pdl-on", b);

  EXPECT_EQ(run({"compare", pa, pb}), 2);
  EXPECT_NE(err().find("kernel switches differ (IB_PDL: 0 (default) vs 1 (env))"),
            std::string::npos)
      << err();
  EXPECT_NE(err().find("--allow-switch-diff"), std::string::npos) << err();
  EXPECT_EQ(lines_of(root_ / "stderr.txt").size(), 1u) << err();

  EXPECT_EQ(run({"compare", pa, pb, "--allow-switch-diff"}), 0) << err();
  EXPECT_NE(out().find("Kernel switches differ (compared with --allow-switch-diff): IB_PDL: 0 "
                       "(default) vs 1 (env)."),
            std::string::npos)
      << out();

  EXPECT_EQ(run({"compare", old, pb}), 0) << err();
  EXPECT_NE(out().find("Kernel switches unknown: A records none"), std::string::npos) << out();
}

// eval: in a suite entry runs `inferbench eval` after the entry's run (its model, dtype and
// quantization), keeps the JSON as DIR/<entry>/eval.json, and the leaderboard shows KL, top-1 and
// perplexity from it ("-" where not measured); an eval that fails marks the entry failed.
TEST_F(E2e, SuiteEvalPutsAccuracyInTheLeaderboard) {
  const fs::path model = testing::tiny_checkpoint_with_tokenizer(root_ / "model");
  std::string text;
  for (int i = 0; i < 4; ++i) text += "Pack my box with five dozen liquor jugs. ";
  write(root_ / "text.txt", text);
  const fs::path yaml = root_ / "acc.yaml";
  write(yaml, fmt::format(R"(name: acc
defaults: {{model: tiny-15m, num_prompts: 2, input_len: 8, output_len: 4, batch_size: 2, runs: 1,
           num_threads: 2, num_warmups: 1, disable_telemetry: true,
           eval: {{num_prompts: 1, input_len: 4, output_len: 2}}}}
entries:
  - {{name: dense}}
  - {{name: fp8, quantization: fp8}}
  - {{name: plain, eval: false}}
  - {{name: ppl, model: {0}, eval: {{text: {1}, ctx_size: 16, chunks: 2, num_prompts: 1,
                                     input_len: 4, output_len: 2}}}}
  - {{name: no-text, eval: {{text: {2}}}}}
)",
                          model.string(), (root_ / "text.txt").string(),
                          (root_ / "missing.txt").string()));
  const fs::path dir = root_ / "suite";
  ASSERT_EQ(run({"suite", yaml.string(), "--dry-run", "--result-dir", dir.string()}), 0) << err();
  EXPECT_NE(out().find("then inferbench eval"), std::string::npos) << out();
  ASSERT_EQ(run({"suite", yaml.string(), "--result-dir", dir.string()}), 1) << err();
  EXPECT_NE(err().find("suite entry 5/5 no-text failed: eval: --text"), std::string::npos) << err();

  const json dense = json::parse(read_file(dir / "dense" / "eval.json").value());
  EXPECT_LT(dense["kl_max"].get<double>(), 1e-9);
  EXPECT_EQ(dense["top1_agreement"], 1.0);
  const json fp8 = json::parse(read_file(dir / "fp8" / "eval.json").value());
  EXPECT_EQ(fp8["candidate"], "fp8");
  EXPECT_GT(fp8["kl_mean"].get<double>(), 0.0);
  EXPECT_FALSE(fs::exists(dir / "plain" / "eval.json"));
  const json ppl = json::parse(read_file(dir / "ppl" / "eval.json").value());
  const double perplexity = ppl["perplexity"]["reference"].get<double>();
  EXPECT_EQ(ppl["perplexity"]["candidate"].get<double>(), perplexity);  // none against none

  const auto row = [](const std::string& md, const std::string& entry) {
    const size_t at = md.find("| " + entry + " |");
    return at == std::string::npos ? std::string() : md.substr(at, md.find('\n', at) - at);
  };
  const std::string md = read_file(dir / "leaderboard.md").value();
  EXPECT_NE(md.find("| KL mean | KL p99 | top-1 | PPL (ref) | status |"), std::string::npos) << md;
  EXPECT_NE(row(md, "dense")
                .find(fmt::format("| {:.4g} | {:.4g} | 100.0% | - | ok",
                                  dense["kl_mean"].get<double>(), dense["kl_p99"].get<double>())),
            std::string::npos)
      << md;
  EXPECT_NE(row(md, "fp8").find(fmt::format("| {:.4g} |", fp8["kl_mean"].get<double>())),
            std::string::npos)
      << md;
  EXPECT_NE(row(md, "plain").find("| - | - | - | - | ok"), std::string::npos) << md;
  EXPECT_NE(row(md, "ppl").find(fmt::format("| {0:.3f} ({0:.3f}) | ok", perplexity)),
            std::string::npos)
      << md;
  EXPECT_NE(row(md, "no-text").find("| - | - | - | - | failed: eval: --text"), std::string::npos)
      << md;
  const auto csv = lines_of(dir / "leaderboard.csv");
  EXPECT_NE(csv[0].find(",kl_mean,kl_p99,top1_agreement,perplexity,reference_perplexity,status"),
            std::string::npos)
      << csv[0];

  // Resumed: every entry finished with the same run and eval flags, so nothing reruns.
  ASSERT_EQ(run({"suite", yaml.string(), "--result-dir", dir.string()}), 1) << err();
  EXPECT_NE(err().find("1/5 dense: ok earlier, skipped"), std::string::npos) << err();
  EXPECT_EQ(err().find(": eval\n"), std::string::npos) << err();
}

// The suite files the repository ships (bench/*.yaml) stay valid: every entry's flags pass
// run's validation (a dry run), e.g. after a flag is renamed.
TEST_F(E2e, ShippedSuiteFilesPassADryRun) {
  const char* src = std::getenv("INFERBENCH_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "ctest sets INFERBENCH_SOURCE_DIR";
  int files = 0;
  for (const auto& f : fs::directory_iterator(fs::path(src) / "bench")) {
    if (f.path().extension() != ".yaml") continue;
    ++files;
    const fs::path dir = root_ / f.path().stem();
    EXPECT_EQ(run({"suite", f.path().string(), "--dry-run", "--result-dir", dir.string()}), 0)
        << f.path() << ": " << err();
    EXPECT_FALSE(fs::exists(dir / "suite-state.json")) << "a dry run writes nothing";
  }
  EXPECT_GE(files, 3);
  // The quantization matrix: one entry per precision, fp8 through --quantization.
  const fs::path qm = fs::path(src) / "bench" / "quant-matrix.yaml";
  ASSERT_EQ(run({"suite", qm.string(), "--dry-run", "--result-dir", (root_ / "qm").string()}), 0);
  EXPECT_NE(out().find("--quantization fp8"), std::string::npos) << out();
  for (const char* q : {"awq", "gptq", "nf4", "gguf"})  // the 4-bit rows (issue 14)
    EXPECT_NE(out().find(std::string("--quantization ") + q), std::string::npos) << out();
  EXPECT_NE(out().find("--dtype fp32"), std::string::npos) << out();
}

}  // namespace
}  // namespace ib
