// A .gguf --model end to end on the CPU: `generate` and `run` load its config, weights and
// tokenizer (`eval --text` scores a text in that tokenizer); --quantization gguf runs it as stored
// (block-typed matmul weights in their blocks) and is refused for another model; a GGUF with an
// architecture, tensor type or tokenizer inferbench cannot run exits 2 with the reader's message
// and writes nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/detail/e2e_support.h"
#include "model/detail/gguf_test_support.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::E2e;

class Gguf : public E2e {
 protected:
  void SetUp() override {
    E2e::SetUp();
    model_ = (root_ / "tiny.gguf").string();
    // A tiny llama in a mix of ggml types, with its tokenizer.
    ASSERT_TRUE(testing::write_test_gguf(model_, testing::test_gguf_config("llama"), 3).ok());
  }
  // The file with its metadata key changed to value, as bad.gguf.
  std::string with_metadata(const std::string& key, GgufValue value) {
    const std::string bad = (root_ / "bad.gguf").string();
    const Status copied = testing::copy_gguf(model_, bad, [&](auto& metadata, auto&) -> Status {
      for (GgufMetadata& m : metadata) {
        if (m.key == key) m.value = value;
      }
      return Ok{};
    });
    EXPECT_TRUE(copied.ok());
    return bad;
  }
  std::string model_;
};

TEST_F(Gguf, GenerateRunsTheFileAsStoredOrQuantized) {
  for (const char* quantization : {"none", "gguf", "int8"}) {
    SCOPED_TRACE(quantization);
    ASSERT_EQ(run({"generate", "--model", model_, "--device", "cpu", "--prompt-token-ids",
                   "0,40,70,71", "--max-tokens", "4", "--quantization", quantization}),
              0)
        << err();
    const json j = json::parse(out());
    EXPECT_EQ(j.at("model"), model_);
    EXPECT_EQ(j.at("token_ids").size(), 4u);
    const std::string weights = j.at("weights");
    EXPECT_EQ(weights.rfind("gguf: " + model_ + " (", 0), 0u) << weights;
    EXPECT_NE(weights.find("Q4_K"), std::string::npos) << weights;
    EXPECT_NE(weights.find("dequantized to fp32 at load"), std::string::npos) << weights;
    EXPECT_EQ(weights.find("int8") != std::string::npos, std::string(quantization) == "int8")
        << weights;
  }
}

TEST_F(Gguf, RunLoadsTheFileAndRecordsIt) {
  const fs::path dir = root_ / "result";
  ASSERT_EQ(run({"run", "--model",        model_, "--device",     "cpu",        "--num-prompts",
                 "4",   "--input-len",    "8",    "--output-len", "4",          "--batch-size",
                 "2",   "--runs",         "1",    "--result-dir", dir.string(), "--num-threads",
                 "2",   "--quantization", "gguf"}),
            0)
      << err();
  const json r = json::parse(read_file(dir / "result.json").value());
  EXPECT_EQ(r["completed"], 4);
  EXPECT_EQ(r["config"]["quantization"], "gguf");
  EXPECT_EQ(r["weights"].get<std::string>().rfind("gguf: " + model_, 0), 0u) << r["weights"];
}

TEST_F(Gguf, QuantizationGgufKeepsBlockTypedMatmulWeightsInTheirBlocks) {
  // Every matrix in Q8_0 (gguf_fixture --dummy's writer): --quantization gguf runs them in their
  // blocks; the test file above, whose attn_output is F16, loads dense throughout.
  const std::string q8 = (root_ / "q8.gguf").string();
  auto mix = gguf_type_mix("q8_0");
  ASSERT_TRUE(mix.ok());
  ASSERT_TRUE(write_dummy_gguf(q8, testing::test_gguf_config("llama"), *mix, 5).ok());
  for (const auto& [file, blocks] : {std::pair{q8, true}, std::pair{model_, false}}) {
    const fs::path dir = root_ / (blocks ? "q8" : "mixed");
    ASSERT_EQ(run({"run", "--model",        file,  "--device",     "cpu",        "--num-prompts",
                   "2",   "--input-len",    "8",   "--output-len", "3",          "--batch-size",
                   "2",   "--runs",         "1",   "--result-dir", dir.string(), "--num-threads",
                   "2",   "--quantization", "gguf"}),
              0)
        << err();
    const json r = json::parse(read_file(dir / "result.json").value());
    EXPECT_EQ(r["completed"], 2);
    const std::string weights = r["weights"];
    EXPECT_EQ(weights.find("matmul tensors in their ggml blocks") != std::string::npos, blocks)
        << weights;
    EXPECT_EQ(weights.find("activations quantized to int8 per 32") != std::string::npos, blocks)
        << weights;
  }
}

// "hello" and " world" are single tokens of the file's tokenizer, " hello" two (Ġ, hello): 11
// tokens, where the byte fallback would count 47.
TEST_F(Gguf, EvalScoresATextInTheFilesTokenizer) {
  const fs::path text = root_ / "text.txt";
  std::ofstream(text) << "hello world hello world hello world hello world";
  const fs::path result = root_ / "eval.json";
  ASSERT_EQ(run({"eval", "--model", model_, "--device", "cpu", "--text", text.string(),
                 "--ctx-size", "4", "--num-prompts", "1", "--input-len", "4", "--output-len", "2",
                 "--output-json", result.string()}),
            0)
      << err();
  const json p = json::parse(read_file(result).value()).at("perplexity");
  EXPECT_EQ(p.at("tokenizer"), "bpe");
  EXPECT_EQ(p.at("text_tokens"), 11);
  EXPECT_EQ(p.at("chunks"), 2);
}

TEST_F(Gguf, WhatItCannotRunExitsTwoNamingIt) {
  const std::string never = (root_ / "never").string();
  auto refuse = [&](const std::string& file, const std::string& expect) {
    expect_refused({"run", "--model", file, "--device", "cpu", "--result-dir", never}, expect,
                   never);
    expect_refused({"generate", "--model", file, "--prompt-token-ids", "1"}, expect, never);
  };
  refuse(with_metadata("general.architecture", GgufValue::of_string("mamba")),
         "GGUF metadata 'general.architecture' is 'mamba', which inferbench cannot run");
  refuse(with_metadata("tokenizer.ggml.model", GgufValue::of_string("t5")),
         "tokenizer.ggml.model 't5' is not supported");

  // blk.0.attn_v.weight's type (after its name, n_dims and two dims) from Q4_0 to Q4_1.
  std::string bytes = read_file(model_).value();
  const std::string name = "blk.0.attn_v.weight";
  const size_t at = bytes.find(name);
  ASSERT_NE(at, std::string::npos);
  const uint32_t q4_1 = 3;
  std::memcpy(bytes.data() + at + name.size() + 4 + 16, &q4_1, 4);
  const fs::path q41 = root_ / "q4_1.gguf";
  std::ofstream(q41, std::ios::binary) << bytes;
  refuse(q41.string(), "has ggml type Q4_1 (3), which inferbench cannot read");

  refuse((root_ / "missing.gguf").string(), "missing.gguf");
}

TEST_F(Gguf, GgufQuantizationNeedsAGgufModel) {
  const std::string never = (root_ / "never").string();
  const std::string expect = "--quantization gguf runs the weights of a GGUF file as stored";
  expect_refused({"run", "--model", "tiny-15m", "--quantization", "gguf", "--result-dir", never},
                 expect, never);
  expect_refused(
      {"generate", "--model", "tiny-15m", "--quantization", "gguf", "--prompt-token-ids", "1"},
      expect, never);
}

}  // namespace
}  // namespace ib
