// End-to-end tests of --calibration on the real binary (CPU): a calibrated int8-w8a8 run records
// its calibration in result.json, eval calibrates its candidate the same way (and the KL it
// measures changes), the suite passes the calibration on to its eval step and labels the row, and
// each bad input exits 2 with one line, writing nothing.
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/detail/e2e_support.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::E2e;

// "a b c" -> {"a", "b", "c"}: a command line without paths.
std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// n prompts of text, one per line.
fs::path write_dataset(const fs::path& path, int n) {
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) out << fmt::format("{{\"prompt\": \"calibration prompt {}\"}}\n", i);
  return path;
}

TEST_F(E2e, CalibratedRunRecordsItsCalibration) {
  const fs::path data = write_dataset(root_ / "prompts.jsonl", 4);
  const fs::path dir = root_ / "result";
  std::vector<std::string> args = words(
      "run --model tiny-15m --device cpu --quantization int8-w8a8 --calibration minmax "
      "--calibration-prompts 3 --dataset-name jsonl --num-prompts 4 --output-len 4 --batch-size 2 "
      "--runs 1 --num-threads 2 --disable-telemetry");
  args.insert(args.end(), {"--dataset-path", data.string(), "--result-dir", dir.string()});
  const int code = run(args);
  ASSERT_EQ(code, 0) << err();
  EXPECT_NE(err().find("inferbench: loading tiny-15m on cpu, then calibrating its activation "
                       "scales on 3 dataset prompts (minmax, asymmetric)"),
            std::string::npos)
      << err();
  // The calibration comes before the warm-ups.
  const size_t calibrated = err().find("inferbench: calibrated static activation scales in ");
  ASSERT_NE(calibrated, std::string::npos) << err();
  EXPECT_LT(calibrated, err().find(" warm-up + ")) << err();

  const json r = json::parse(read_file(dir / "result.json").value());
  EXPECT_EQ(r["completed"], 4);
  const json& c = r["config"];
  EXPECT_EQ(c["quantization"], "int8-w8a8");
  EXPECT_EQ(c["calibration"], "minmax");
  EXPECT_EQ(c["calibration_scheme"], "asymmetric");
  EXPECT_TRUE(c["calibration_percentile"].is_null());
  EXPECT_EQ(c["calibration_prompts"], 3);
  const json& e = r["engine"]["engine"]["calibration"];
  EXPECT_EQ(e["method"], "minmax");
  EXPECT_EQ(e["prompts"], 3);
  EXPECT_GT(e["seconds"].get<double>(), 0.0);

  // Rerun from the record: the same calibration.
  ASSERT_EQ(run({"run", "--from", dir.string(), "--result-dir", (root_ / "again").string()}), 0)
      << err();
  const json again = json::parse(read_file(root_ / "again" / "result.json").value());
  for (const char* key :
       {"calibration", "calibration_scheme", "calibration_percentile", "calibration_prompts"}) {
    EXPECT_EQ(again["config"][key], c[key]) << key;
  }
}

TEST_F(E2e, EvalMeasuresTheCalibratedCandidate) {
  const fs::path data = write_dataset(root_ / "prompts.jsonl", 4);
  const std::vector<std::string> common = words(
      "eval --model tiny-15m --device cpu --quantization int8-w8a8 --num-prompts 2 --input-len 8 "
      "--output-len 4");
  std::vector<std::string> dynamic = common;
  dynamic.insert(dynamic.end(), {"--output-json", (root_ / "dynamic.json").string()});
  ASSERT_EQ(run(dynamic), 0) << err();
  std::vector<std::string> calibrated = common;
  calibrated.insert(
      calibrated.end(),
      {"--calibration", "percentile", "--calibration-scheme", "symmetric",
       "--calibration-percentile", "0.999", "--calibration-prompts", "4", "--dataset-path",
       data.string(), "--output-json", (root_ / "calibrated.json").string()});
  ASSERT_EQ(run(calibrated), 0) << err();
  EXPECT_NE(out().find("| int8-w8a8, static percentile symmetric |"), std::string::npos) << out();
  const json d = json::parse(read_file(root_ / "dynamic.json").value());
  const json s = json::parse(read_file(root_ / "calibrated.json").value());
  EXPECT_TRUE(d["candidate_calibration"].is_null());
  EXPECT_EQ(s["candidate_calibration"], (json{{"method", "percentile"},
                                              {"scheme", "symmetric"},
                                              {"percentile", 0.999},
                                              {"prompts", 4},
                                              {"dataset_path", data.string()}}));
  EXPECT_GT(s["kl_mean"].get<double>(), 0.0);
  EXPECT_NE(s["kl_mean"].get<double>(), d["kl_mean"].get<double>());  // other scales ran
}

TEST_F(E2e, SuitePassesTheCalibrationToItsEvalAndLabelsTheRow) {
  const fs::path data = write_dataset(root_ / "prompts.jsonl", 2);
  const fs::path yaml = root_ / "calib.yaml";
  std::ofstream(yaml) << fmt::format(
      "name: calib\n"
      "defaults: {{model: tiny-15m, num_prompts: 2, output_len: 4, batch_size: 2, runs: 1,\n"
      "           num_threads: 2, num_warmups: 1, disable_telemetry: true,\n"
      "           eval: {{num_prompts: 1, input_len: 4, output_len: 2}}}}\n"
      "entries:\n"
      "  - {{name: static, quantization: int8-w8a8, calibration: minmax,\n"
      "     calibration_prompts: 2, dataset_name: jsonl, dataset_path: {}}}\n",
      data.string());
  const fs::path dir = root_ / "suite";
  ASSERT_EQ(run({"suite", yaml.string(), "--result-dir", dir.string()}), 0) << err();
  const json eval = json::parse(read_file(dir / "static" / "eval.json").value());
  EXPECT_EQ(eval["candidate_calibration"]["method"], "minmax");
  EXPECT_EQ(eval["candidate_calibration"]["prompts"], 2);
  const std::string md = read_file(dir / "leaderboard.md").value();
  EXPECT_NE(md.find("| int8-w8a8, static minmax asymmetric |"), std::string::npos) << md;
}

TEST_F(E2e, CalibrationBadInputExitsTwoWithOneLineAndLeavesNothing) {
  const std::string data = write_dataset(root_ / "prompts.jsonl", 4).string();
  const std::string dir = (root_ / "never").string();
  const std::vector<std::string> ok = {"--quantization", "int8-w8a8", "--dataset-name", "jsonl",
                                       "--dataset-path", data,        "--result-dir",   dir};
  const auto with = [&](std::vector<std::string> args, bool dataset = true) {
    args.insert(args.begin(), "run");
    if (dataset) args.insert(args.end(), ok.begin() + 2, ok.end());
    return args;
  };
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {with({"--calibration", "minmax"}),
       "--calibration minmax sets static activation scales of int8 W8A8 weights, not of "
       "--quantization none; add --quantization int8-w8a8 or drop --calibration"},
      {with({"--calibration", "minmax", "--quantization", "int8-w8a8", "--result-dir", dir}, false),
       "--dataset-name random has no prompts of its own"},
      {with({"--calibration", "minmax", "--quantization", "int8-w8a8", "--calibration-prompts",
             "0"}),
       "--calibration-prompts 0: calibrate on at least 1 prompt"},
      {with({"--calibration", "minmax", "--quantization", "int8-w8a8", "--calibration-prompts",
             "5"}),
       "--calibration-prompts 5: dataset " + data + " holds 4 prompts; use 1 to 4"},
      {with({"--calibration", "percentile", "--quantization", "int8-w8a8",
             "--calibration-percentile", "0.5"}),
       "--calibration-percentile 0.5: must be in (0.5, 1]"},
      {with({"--calibration", "minmax", "--quantization", "int8-w8a8", "--calibration-percentile",
             "0.99"}),
       "--calibration-percentile applies to --calibration percentile"},
      {with({"--calibration-scheme", "symmetric", "--quantization", "int8-w8a8"}),
       "add it or drop them"},
      {{"eval", "--model", "tiny-15m", "--quantization", "int8-w8a8", "--calibration", "minmax",
        "--output-json", dir},
       "--calibration minmax calibrates on a dataset's prompts: add --dataset-path FILE"},
  };
  for (const auto& c : cases) expect_refused(c.args, c.expect, dir);
}

}  // namespace
}  // namespace ib
