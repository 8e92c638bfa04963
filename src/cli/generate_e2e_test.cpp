// `inferbench generate` end to end on the CPU: the greedy ids as JSON on stdout, the logits as a
// .npy whose rows' argmax are those ids, and user errors (exit 2) for bad token ids and a CUDA
// device index that does not exist.
#include <gtest/gtest.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "cli/detail/e2e_support.h"

namespace ib {
namespace {

using testing::E2e;

TEST_F(E2e, GenerateWritesTokensAndLogits) {
  const auto npy = root_ / "logits.npy";
  ASSERT_EQ(run({"generate", "--model", "tiny-15m", "--device", "cpu", "--prompt-token-ids",
                 "1,15,300,7", "--max-tokens", "5", "--dump-logits", npy.string()}),
            0)
      << err();
  const auto j = nlohmann::json::parse(out());
  const std::vector<int32_t> tokens = j.at("token_ids");
  ASSERT_EQ(tokens.size(), 5u);
  EXPECT_EQ(j.at("prompt_token_ids"), (std::vector<int32_t>{1, 15, 300, 7}));
  EXPECT_EQ(j.at("dtype"), "fp32");

  const std::string bytes = read_file(npy).value();
  ASSERT_GT(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  const size_t header = static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8;
  EXPECT_EQ((10 + header) % 64, 0u);
  EXPECT_NE(bytes.find("'shape': (5, 32000)"), std::string::npos);
  const size_t vocab = 32000;
  ASSERT_EQ(bytes.size(), 10 + header + 5 * vocab * sizeof(float));
  for (size_t step = 0; step < 5; ++step) {
    std::vector<float> row(vocab);
    std::memcpy(row.data(), bytes.data() + 10 + header + step * vocab * sizeof(float),
                vocab * sizeof(float));
    const auto best = std::max_element(row.begin(), row.end()) - row.begin();
    EXPECT_EQ(best, tokens[step]) << "step " << step;  // greedy: the argmax of its logits
  }
}

TEST_F(E2e, GenerateRefusesBadInputWithExitCode2) {
  EXPECT_EQ(run({"generate", "--model", "tiny-15m", "--prompt-token-ids", "1,x,3"}), 2);
  EXPECT_NE(err().find("--prompt-token-ids"), std::string::npos) << err();
  EXPECT_EQ(run({"generate", "--model", "tiny-15m", "--prompt-token-ids", "1,99999999"}), 2);
  EXPECT_NE(err().find("vocabulary"), std::string::npos) << err();
  EXPECT_EQ(
      run({"generate", "--model", "tiny-15m", "--device", "cuda:99", "--prompt-token-ids", "1"}),
      2);
  EXPECT_NE(err().find("99"), std::string::npos) << err();
}

// `inferbench eval`: the model against itself agrees exactly (teacher-forced prefill and decode
// give the same logits on the CPU), fp8 against dense gives a positive KL with its numbers in the
// JSON file, and bad sizes are user errors.
TEST_F(E2e, EvalComparesAQuantizationWithTheDenseModel) {
  const auto self = root_ / "self.json";
  const std::vector<std::string> small = {"--model",     "tiny-15m", "--num-prompts", "2",
                                          "--input-len", "8",        "--output-len",  "4"};
  auto args = small;
  for (const char* a : {"--quantization", "none", "--output-json"}) args.emplace_back(a);
  args.push_back(self.string());
  args.insert(args.begin(), "eval");
  ASSERT_EQ(run(args), 0) << err();
  const auto s = nlohmann::json::parse(read_file(self).value());
  EXPECT_EQ(s.at("tokens"), 8);
  EXPECT_LT(s.at("kl_max").get<double>(), 1e-9) << s.dump();
  EXPECT_EQ(s.at("top1_agreement").get<double>(), 1.0);

  const auto fp8 = root_ / "fp8.json";
  args = small;
  args.insert(args.begin(), "eval");
  for (const char* a : {"--quantization", "fp8", "--output-json"}) args.emplace_back(a);
  args.push_back(fp8.string());
  ASSERT_EQ(run(args), 0) << err();
  EXPECT_NE(out().find("| tiny-15m | none | fp8 | 8 |"), std::string::npos) << out();
  const auto q = nlohmann::json::parse(read_file(fp8).value());
  EXPECT_GT(q.at("kl_mean").get<double>(), 0.0);
  EXPECT_GE(q.at("kl_max").get<double>(), q.at("kl_p99").get<double>());
  EXPECT_GE(q.at("kl_p99").get<double>(), 0.0);
  EXPECT_GE(q.at("top1_agreement").get<double>(), 0.0);
  EXPECT_LE(q.at("top1_agreement").get<double>(), 1.0);

  EXPECT_EQ(run({"eval", "--model", "tiny-15m", "--num-prompts", "0"}), 2);
  EXPECT_NE(err().find("--num-prompts"), std::string::npos) << err();
  EXPECT_EQ(run({"eval", "--model", "tiny-15m", "--quantization", "int3"}), 2);
  EXPECT_NE(err().find("none or fp8"), std::string::npos) << err();
}

}  // namespace
}  // namespace ib
