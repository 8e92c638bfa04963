// `inferbench generate` end to end on the CPU: the greedy ids as JSON on stdout, the logits as a
// .npy whose rows' argmax are those ids, and user errors (exit 2) for bad token ids and a CUDA
// device index that does not exist.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/detail/e2e_support.h"

namespace ib {
namespace {

using testing::E2e;

// The rows of a (steps, vocab) float32 .npy as `generate --dump-logits` writes it.
std::vector<std::vector<float>> npy_rows(const std::string& bytes, size_t steps, size_t vocab) {
  EXPECT_GT(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  const size_t header = static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8;
  EXPECT_EQ((10 + header) % 64, 0u);
  EXPECT_NE(bytes.find("'shape': (" + std::to_string(steps) + ", " + std::to_string(vocab) + ")"),
            std::string::npos);
  EXPECT_EQ(bytes.size(), 10 + header + steps * vocab * sizeof(float));
  std::vector<std::vector<float>> rows(steps, std::vector<float>(vocab));
  for (size_t step = 0; step < steps && bytes.size() >= 10 + header + steps * vocab * 4; ++step) {
    std::memcpy(rows[step].data(), bytes.data() + 10 + header + step * vocab * sizeof(float),
                vocab * sizeof(float));
  }
  return rows;
}

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

  const auto rows = npy_rows(read_file(npy).value(), 5, 32000);
  for (size_t step = 0; step < 5; ++step) {
    const std::vector<float>& row = rows[step];
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

// --kv-cache-dtype fp8 on the CPU (E4M3 K and V, scales 1.0 for dummy weights): generate runs,
// and its logits stay close to the fp32 cache's (relative L2 below 0.1 at every step before the
// greedy tokens part; they do differ: the cache is E4M3). A bad value exits 2 naming the values.
TEST_F(E2e, GenerateWithAnFp8KvCacheStaysCloseToAuto) {
  const size_t steps = 6, vocab = 32000;
  std::vector<std::vector<float>> logits[2];
  std::vector<int32_t> tokens[2];
  for (int fp8 = 0; fp8 < 2; ++fp8) {
    const auto npy = root_ / (fp8 ? "fp8.npy" : "auto.npy");
    ASSERT_EQ(run({"generate", "--model", "tiny-15m", "--prompt-token-ids", "1,15,300,7,42,9",
                   "--max-tokens", std::to_string(steps), "--kv-cache-dtype", fp8 ? "fp8" : "auto",
                   "--dump-logits", npy.string()}),
              0)
        << err();
    tokens[fp8] = nlohmann::json::parse(out()).at("token_ids").get<std::vector<int32_t>>();
    logits[fp8] = npy_rows(read_file(npy).value(), steps, vocab);
  }
  double largest = 0;
  for (size_t step = 0; step < steps; ++step) {
    double num = 0, den = 0;
    for (size_t i = 0; i < vocab; ++i) {
      const double d = double{logits[1][step][i]} - logits[0][step][i];
      num += d * d;
      den += double{logits[0][step][i]} * logits[0][step][i];
    }
    largest = std::max(largest, std::sqrt(num / den));
    EXPECT_LT(std::sqrt(num / den), 0.1) << "step " << step;
    if (tokens[0][step] != tokens[1][step]) break;  // later steps see different contexts
  }
  EXPECT_GT(largest, 0.0) << "the fp8 cache changed nothing";

  EXPECT_EQ(run({"generate", "--model", "tiny-15m", "--prompt-token-ids", "1", "--kv-cache-dtype",
                 "fp4"}),
            2);
  EXPECT_NE(err().find("--kv-cache-dtype fp4"), std::string::npos) << err();
  EXPECT_NE(err().find("auto (the model dtype), fp8 or fp8_e4m3"), std::string::npos) << err();
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
