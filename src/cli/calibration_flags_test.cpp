// The --calibration flags: parsing into a RunPlan (the dataset's first prompts reach the native
// target, the settings reach result.json's config and come back through `run --from`), and every
// refusal naming the flag and the fix, before anything is created.
#include "cli/calibration_flags.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "cli/plugins.h"
#include "cli/run_options.h"
#include "cli/suite_commands.h"

namespace ib {
namespace {

namespace fs = std::filesystem;

class CalibrationFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(register_builtin_plugins(registry_).ok());
    root_ = fs::temp_directory_path() /
            ("ib_calibration_" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    dataset_ = root_ / "prompts.jsonl";
    std::ofstream(dataset_) << "{\"prompt\": \"first\"}\n"
                               "{\"prompt_token_ids\": [7, 8, 9]}\n"
                               "{\"prompt\": \"third one\"}\n";
  }
  void TearDown() override { fs::remove_all(root_); }

  // A calibrated int8-w8a8 run on the three-prompt dataset.
  RunFlags flags() const {
    RunFlags f;
    f.num_prompts = 4;
    f.output_len = 4;
    f.quantization = "int8-w8a8";
    f.calibration = "minmax";
    f.calibration_prompts = 2;
    f.dataset_name = "jsonl";
    f.dataset_path = dataset_.string();
    f.result_dir = (root_ / "out").string();
    return f;
  }

  std::string refusal(const RunFlags& f) const {
    auto plan = resolve_run(f, registry_);
    EXPECT_FALSE(plan.ok());
    if (plan.ok()) return "";
    EXPECT_EQ(plan.error().kind, ErrorKind::kUser);
    EXPECT_EQ(plan.error().message.find('\n'), std::string::npos) << plan.error().message;
    EXPECT_FALSE(fs::exists(root_ / "out"));
    return plan.error().message;
  }

  PluginRegistry registry_;
  fs::path root_, dataset_;
};

TEST_F(CalibrationFlagsTest, TheDatasetsFirstPromptsReachTheTargetAndTheConfig) {
  auto plan = resolve_run(flags(), registry_);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const auto& c = plan->target.native.calibration;
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->options.method, CalibrationMethod::kMinMax);
  EXPECT_EQ(c->options.scheme, ActivationScheme::kAsymmetric);  // the seed's
  ASSERT_EQ(c->prompts.size(), 2u);
  EXPECT_EQ(c->prompts[0], plan->requests[0].prompt_tokens);  // tokenized as the run's
  EXPECT_EQ(c->prompts[1], (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(plan->config["quantization"], "int8-w8a8");
  EXPECT_EQ(plan->config["calibration"], "minmax");
  EXPECT_EQ(plan->config["calibration_scheme"], "asymmetric");
  EXPECT_TRUE(plan->config["calibration_percentile"].is_null());
  EXPECT_EQ(plan->config["calibration_prompts"], 2);
  EXPECT_FALSE(fs::exists(root_ / "out"));
}

TEST_F(CalibrationFlagsTest, DefaultsAndPercentile) {
  RunFlags f = flags();
  f.calibration = "percentile";
  f.calibration_prompts.reset();
  f.calibration_scheme = "symmetric";
  std::ofstream big(dataset_);
  for (int i = 0; i < kDefaultCalibrationPrompts; ++i) big << "{\"prompt\": \"p" << i << "\"}\n";
  big.close();
  auto plan = resolve_run(f, registry_);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const auto& c = plan->target.native.calibration;
  EXPECT_EQ(c->options.method, CalibrationMethod::kPercentile);
  EXPECT_EQ(c->options.scheme, ActivationScheme::kSymmetric);
  EXPECT_DOUBLE_EQ(c->options.percentile, 0.9999);
  EXPECT_EQ(c->prompts.size(), static_cast<size_t>(kDefaultCalibrationPrompts));
  EXPECT_EQ(plan->config["calibration_percentile"], 0.9999);

  f.calibration = "none";  // the default: no calibration, every key null
  f.calibration_scheme.reset();
  plan = resolve_run(f, registry_);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_FALSE(plan->target.native.calibration.has_value());
  for (const char* key :
       {"calibration", "calibration_scheme", "calibration_percentile", "calibration_prompts"}) {
    EXPECT_TRUE(plan->config[key].is_null()) << key;
  }
}

TEST_F(CalibrationFlagsTest, RunFromGivesTheSameCalibrationBack) {
  RunFlags f = flags();
  f.calibration = "percentile";
  f.calibration_percentile = 0.999;
  auto plan = resolve_run(f, registry_);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  auto args = args_from_config(plan->config);
  ASSERT_TRUE(args.ok()) << args.error().message;
  auto again = parse_run_args(*args);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(again->calibration, "percentile");
  EXPECT_EQ(again->calibration_prompts, 2);
  EXPECT_EQ(again->calibration_scheme, "asymmetric");
  EXPECT_EQ(again->calibration_percentile, 0.999);
  EXPECT_EQ(calibration_args(*again),
            (std::vector<std::string>{"--calibration", "percentile", "--calibration-prompts", "2",
                                      "--calibration-scheme", "asymmetric",
                                      "--calibration-percentile", "0.999"}));
}

TEST_F(CalibrationFlagsTest, EachRefusalNamesTheProblemAndTheFix) {
  struct Case {
    std::function<void(RunFlags&)> change;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](RunFlags& f) { f.quantization = "fp8"; },
       "not of --quantization fp8; add --quantization int8-w8a8 or drop --calibration"},
      {[](RunFlags& f) { f.quantization = "none"; }, "add --quantization int8-w8a8"},
      {[](RunFlags& f) { f.calibration = "entropy"; },
       "--calibration entropy: use none, minmax or percentile"},
      {[](RunFlags& f) { f.calibration_scheme = "affine"; },
       "--calibration-scheme affine: use asymmetric or symmetric"},
      {[](RunFlags& f) { f.calibration_prompts = 0; }, "--calibration-prompts 0: calibrate on at"},
      {[](RunFlags& f) { f.calibration_prompts = 4; }, "holds 3 prompts; use 1 to 3"},
      {[](RunFlags& f) { f.calibration_percentile = 0.999; },
       "--calibration-percentile applies to --calibration percentile"},
      {[](RunFlags& f) {
         f.calibration = "percentile";
         f.calibration_percentile = 0.5;
       },
       "--calibration-percentile 0.5: must be in (0.5, 1]"},
      {[](RunFlags& f) {
         f.calibration = "percentile";
         f.calibration_percentile = 1.5;
       },
       "must be in (0.5, 1]"},
      {[](RunFlags& f) {
         f.calibration = "none";
         f.calibration_prompts = 8;
       },
       "set up --calibration minmax|percentile; add it or drop them"},
      {[](RunFlags& f) {
         f.dataset_name = "random";
         f.dataset_path.clear();
       },
       "--dataset-name random has no prompts of its own (its prompts are random token ids); "
       "calibration needs real prompts: use --dataset-name jsonl --dataset-path FILE"},
      {[](RunFlags& f) { f.backend = "openai"; }, "--backend openai runs none here"},
  };
  for (const Case& c : cases) {
    RunFlags f = flags();
    c.change(f);
    const std::string message = refusal(f);
    EXPECT_NE(message.find(c.expect), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace ib
