// `run --from`: a resolved config turned back into flags resolves to the same config.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli/plugins.h"
#include "cli/suite_commands.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json resolved_config(const std::vector<std::string>& args, const PluginRegistry& registry) {
  auto flags = parse_run_args(args);
  EXPECT_TRUE(flags.ok()) << flags.error().message;
  auto plan = resolve_run(*flags, registry);
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  return plan.ok() ? plan->config : json();
}

class RunFromTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(register_builtin_plugins(registry_).ok()); }
  std::string dir(const char* name) const {
    return (fs::temp_directory_path() / "ib_run_from_test" / name).string();
  }
  PluginRegistry registry_;
};

TEST_F(RunFromTest, EveryFlagRoundTripsThroughTheConfig) {
  const std::vector<std::vector<std::string>> cases = {
      {"--model",
       "tiny-15m",
       "--seed",
       "9",
       "--num-prompts",
       "5",
       "--input-len-dist",
       "normal:mean=20,std=4,min=8,max=40",
       "--output-len",
       "7",
       "--max-concurrency",
       "3",
       "--request-rate",
       "12.5",
       "--burstiness",
       "2",
       "--goodput",
       "ttft:200",
       "--metric-percentiles",
       "50,99",
       "--percentile-metrics",
       "ttft,e2el",
       "--num-warmups",
       "2",
       "--disable-telemetry",
       "--no-ignore-eos",
       "--temperature",
       "0.7",
       "--top-p",
       "0.9",
       "--top-k",
       "5",
       "--block-size",
       "32",
       "--batching",
       "static",
       "--max-model-len",
       "512",
       "--kv-cache-memory",
       "64MiB",
       "--cv-threshold",
       "2%",
       "--memory-sample-interval",
       "7",
       "--disable-tqdm"},
      {"--model", "tiny-15m", "--load-mode", "closed", "--max-concurrency", "2", "--num-prompts",
       "3", "--input-len", "4", "--output-len", "4", "--no-cuda-graphs", "--quantization", "fp8"},
      {"--backend", "openai", "--model", "served-model", "--base-url", "http://127.0.0.1:9",
       "--endpoint", "/v1/completions", "--extra-body", "{\"x\":1}", "--request-timeout", "30",
       "--insecure", "--num-prompts", "2", "--input-len", "4", "--output-len", "4"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    auto args = cases[i];
    args.insert(args.end(), {"--result-dir", dir("a")});
    const json first = resolved_config(args, registry_);
    ASSERT_TRUE(first.is_object());
    auto back = args_from_config(first);
    ASSERT_TRUE(back.ok()) << back.error().message;
    back->insert(back->end(), {"--result-dir", dir("b")});
    json second = resolved_config(*back, registry_);
    EXPECT_EQ(second["result_dir"], dir("b"));
    json expected = first;
    expected["result_dir"] = dir("b");
    EXPECT_EQ(second, expected) << "case " << i;
    EXPECT_TRUE(config_drift(first, second, {"--result-dir", dir("b")}).empty());
  }
}

TEST_F(RunFromTest, DriftNamesKeysNotOverridden) {
  const json recorded = {{"seed", 1}, {"runs", 3}, {"result_dir", "x"}, {"input_len", "8"}};
  const json now = {{"seed", 2}, {"runs", 5}, {"result_dir", "y"}, {"input_len", "uniform"}};
  EXPECT_EQ(config_drift(recorded, now, {"--runs", "5", "--input-len-dist", "uniform"}),
            std::vector<std::string>{"seed: 1 vs 2"});
}

TEST_F(RunFromTest, LaterArgumentsWinAndBadOnesAreUserErrors) {
  auto flags = parse_run_args({"--runs", "3", "--runs", "1", "--model", "tiny-15m"});
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->runs, 1);
  auto bad = parse_run_args({"--runs", "three"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::kUser);
  EXPECT_FALSE(args_from_config(json{{"model", json::array()}}).ok());
}

}  // namespace
}  // namespace ib
