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

namespace fs = std::filesystem;
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

// --tensor-parallel-size 2 on the CPU: the same greedy tokens as one rank, and logits within
// fp32's reordering of the ranks' partial sums (tools/hf_compare.py --inferbench-args uses it).
TEST_F(E2e, GenerateOverTwoRanksGivesOneRanksTokens) {
  std::vector<std::vector<float>> logits[2];
  std::vector<int32_t> tokens[2];
  for (int tp = 1; tp <= 2; ++tp) {
    const auto npy = root_ / ("tp" + std::to_string(tp) + ".npy");
    ASSERT_EQ(
        run({"generate", "--model", "tiny-15m", "--prompt-token-ids", "1,15,300,7", "--max-tokens",
             "4", "--dump-logits", npy.string(), "--tensor-parallel-size", std::to_string(tp)}),
        0)
        << err();
    tokens[tp - 1] = nlohmann::json::parse(out()).at("token_ids").get<std::vector<int32_t>>();
    logits[tp - 1] = npy_rows(read_file(npy).value(), 4, 32000);
  }
  EXPECT_EQ(tokens[1], tokens[0]);
  for (size_t step = 0; step < 4; ++step) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < logits[0][step].size(); ++i) {
      const double d = double{logits[1][step][i]} - logits[0][step][i];
      diff += d * d;
      norm += double{logits[0][step][i]} * logits[0][step][i];
    }
    EXPECT_LT(std::sqrt(diff / norm), 1e-5) << "step " << step;
  }
  EXPECT_EQ(run({"generate", "--model", "tiny-15m", "--prompt-token-ids", "1",
                 "--tensor-parallel-size", "4"}),
            2);
  EXPECT_NE(err().find("6 attention heads, which 4 does not divide"), std::string::npos) << err();
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
  EXPECT_NE(out().find("| tiny-15m | none | fp8 | 8..11 | 8 |"), std::string::npos) << out();
  const auto q = nlohmann::json::parse(read_file(fp8).value());
  EXPECT_GT(q.at("kl_mean").get<double>(), 0.0);
  EXPECT_GE(q.at("kl_max").get<double>(), q.at("kl_p99").get<double>());
  EXPECT_GE(q.at("kl_p99").get<double>(), 0.0);
  EXPECT_GE(q.at("top1_agreement").get<double>(), 0.0);
  EXPECT_LE(q.at("top1_agreement").get<double>(), 1.0);

  EXPECT_EQ(run({"eval", "--model", "tiny-15m", "--num-prompts", "0"}), 2);
  EXPECT_NE(err().find("--num-prompts"), std::string::npos) << err();
  EXPECT_EQ(run({"eval", "--model", "tiny-15m", "--quantization", "int3"}), 2);
  EXPECT_NE(err().find("--quantization int3"), std::string::npos) << err();
  EXPECT_EQ(err().find("eval: reference"), std::string::npos) << "refused before running";
}

// eval --block-sparse-attention: the candidate's attention under the pattern against the dense
// reference. A pattern whose band covers the whole context is dense attention (KL 0); a narrow one
// over 48-token contexts gives a positive KL, and the JSON and the table name the pattern.
TEST_F(E2e, EvalMeasuresBlockSparseAttentionAgainstDense) {
  const auto eval = [&](const std::string& pattern, const fs::path& json) {
    return run({"eval", "--model", "tiny-15m", "--num-prompts", "2", "--input-len", "48",
                "--output-len", "4", "--quantization", "none", "--block-sparse-attention", pattern,
                "--output-json", json.string()});
  };
  const auto wide = root_ / "wide.json", narrow = root_ / "narrow.json";
  ASSERT_EQ(eval("local_blocks=8,vert_stride=3,block_size=8", wide), 0) << err();
  EXPECT_LT(nlohmann::json::parse(read_file(wide).value()).at("kl_max").get<double>(), 1e-9);
  ASSERT_EQ(eval("local_blocks=1,vert_stride=3,block_size=8", narrow), 0) << err();
  EXPECT_NE(out().find("| tiny-15m | none | none, block-sparse "
                       "local_blocks=1,vert_stride=3,block_size=8 | 48..51 | 8 |"),
            std::string::npos)
      << out();
  const auto q = nlohmann::json::parse(read_file(narrow).value());
  EXPECT_GT(q.at("kl_mean").get<double>(), 0.0);
  EXPECT_EQ(q.at("candidate_block_sparse_attention"), "local_blocks=1,vert_stride=3,block_size=8");
  EXPECT_EQ(run({"eval", "--model", "tiny-15m", "--block-sparse-attention", "vert_stride=2"}), 2);
  EXPECT_NE(err().find("local_blocks and vert_stride are both needed"), std::string::npos) << err();
}

// eval --text on a checkpoint with its own tokenizer (testing::tiny_checkpoint_with_tokenizer):
// its ids are the bytes, so the test knows every chunk's tokens: the text's bytes, 16 at a time,
// the first of each replaced by BOS (0).
class EvalText : public E2e {
 protected:
  void SetUp() override {
    E2e::SetUp();
    model_ = testing::tiny_checkpoint_with_tokenizer(root_ / "model");
    text_ = root_ / "text.txt";
    for (int i = 0; i < 3; ++i) text_bytes_ += "The quick brown fox jumps over the lazy dog. ";
    std::ofstream(text_) << text_bytes_;
  }

  std::vector<std::string> eval_args(const std::string& quantization, const fs::path& json) const {
    return {"eval",
            "--model",
            model_.string(),
            "--quantization",
            quantization,
            "--text",
            text_.string(),
            "--ctx-size",
            "16",
            "--chunks",
            "3",
            "--num-prompts",
            "1",
            "--input-len",
            "4",
            "--output-len",
            "2",
            "--output-json",
            json.string()};
  }

  static constexpr int kCtx = 16;
  fs::path model_, text_;
  std::string text_bytes_;
};

// The model against itself gives the same perplexity, and that perplexity is exp of the mean NLL
// computed here from `generate`'s logits: for each scored token (8 + 1 .. 15 of each chunk) the
// prompt up to the token before it, one step, -log softmax at the token.
TEST_F(EvalText, PerplexityIsExpOfTheMeanNllOfTheSecondHalfOfEachChunk) {
  const auto json = root_ / "self.json";
  ASSERT_EQ(run(eval_args("none", json)), 0) << err();
  const auto p = nlohmann::json::parse(read_file(json).value()).at("perplexity");
  EXPECT_EQ(p.at("tokenizer"), "bpe");
  EXPECT_EQ(p.at("text_tokens"), text_bytes_.size());
  EXPECT_EQ(p.at("chunks"), 3);
  EXPECT_EQ(p.at("scored_tokens"), 3 * (kCtx - 1 - kCtx / 2));
  EXPECT_EQ(p.at("reference").get<double>(), p.at("candidate").get<double>()) << p.dump();
  EXPECT_EQ(p.at("ratio").get<double>(), 1.0);
  EXPECT_NE(out().find("| text.txt | 135 | 3 x 16 | 21 |"), std::string::npos) << out();

  double nll = 0;
  int scored = 0;
  for (int c = 0; c < 3; ++c) {
    std::vector<int32_t> chunk;
    for (int i = 0; i < kCtx; ++i) {
      chunk.push_back(static_cast<uint8_t>(text_bytes_[static_cast<size_t>(c * kCtx + i)]));
    }
    chunk[0] = 0;  // BOS
    for (int pos = kCtx / 2; pos + 1 < kCtx; ++pos) {
      std::string ids;
      for (int i = 0; i <= pos; ++i) {
        if (i > 0) ids += ',';
        ids += std::to_string(chunk[static_cast<size_t>(i)]);
      }
      const auto npy = root_ / "row.npy";
      ASSERT_EQ(run({"generate", "--model", model_.string(), "--prompt-token-ids", ids,
                     "--max-tokens", "1", "--dump-logits", npy.string()}),
                0)
          << err();
      const auto row = npy_rows(read_file(npy).value(), 1, 320).at(0);
      double max = -INFINITY, sum = 0;
      for (float v : row) max = std::max(max, double{v});
      for (float v : row) sum += std::exp(double{v} - max);
      nll += max + std::log(sum) - row[static_cast<size_t>(chunk[pos + 1])];
      ++scored;
    }
  }
  const double want = std::exp(nll / scored);
  EXPECT_NEAR(p.at("reference").get<double>(), want, 1e-5 * want) << p.dump();
  EXPECT_GT(want, 1.0);
}

TEST_F(EvalText, Fp8PerplexityDiffersFromTheDenseModel) {
  const auto json = root_ / "fp8.json";
  ASSERT_EQ(run(eval_args("fp8", json)), 0) << err();
  const auto p = nlohmann::json::parse(read_file(json).value()).at("perplexity");
  EXPECT_NE(p.at("candidate").get<double>(), p.at("reference").get<double>()) << p.dump();
  EXPECT_NEAR(p.at("ratio").get<double>(),
              p.at("candidate").get<double>() / p.at("reference").get<double>(), 1e-12);
  EXPECT_NEAR(p.at("delta").get<double>(),
              p.at("candidate").get<double>() - p.at("reference").get<double>(), 1e-12);
}

// Each refusal exits 2 before any engine loads, names its fix, and writes no JSON.
TEST_F(EvalText, BadTextInputIsAUserErrorAndWritesNothing) {
  const auto json = root_ / "out.json";
  const auto refuse = [&](std::vector<std::string> args, const std::string& message) {
    EXPECT_EQ(run(args), 2) << err();
    EXPECT_NE(err().find(message), std::string::npos) << err();
    EXPECT_FALSE(fs::exists(json));
    EXPECT_FALSE(fs::exists(json.string() + ".tmp"));
  };
  auto args = eval_args("none", json);
  const auto with = [&](const std::string& flag, const std::string& value) {
    auto a = args;
    *(std::find(a.begin(), a.end(), flag) + 1) = value;
    return a;
  };
  refuse(with("--text", (root_ / "missing.txt").string()), "no such file");
  std::ofstream(root_ / "empty.txt").flush();
  refuse(with("--text", (root_ / "empty.txt").string()), "the file is empty");
  std::ofstream(root_ / "short.txt") << "too short";
  refuse(with("--text", (root_ / "short.txt").string()),
         "9 tokens, fewer than one chunk of --ctx-size 16");
  refuse(with("--model", "tiny-15m"), "has no tokenizer.json");
  refuse(with("--ctx-size", "2"), "--ctx-size 2: use 3 to");
  refuse(with("--chunks", "0"), "--chunks 0");
}

}  // namespace
}  // namespace ib
