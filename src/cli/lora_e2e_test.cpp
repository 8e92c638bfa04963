// End-to-end: LoRA adapters on a tiny Llama directory on the CPU. `run` serves two adapters
// round-robin and records each request's adapter and each adapter's metrics; `generate` gives
// the same tokens with the adapter unmerged and merged; bad adapters and flags exit 2 naming the
// problem and the fix.
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/detail/e2e_support.h"
#include "engine/detail/lora_test_support.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::E2e;

ModelConfig tiny_llama_config(int hidden = 64) {
  ModelConfig c;
  c.name = "tiny-llama";
  c.family = "llama";
  c.vocab_size = 320;
  c.hidden_size = hidden;
  c.intermediate_size = 96;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = hidden / 4;
  return c;
}

fs::path tiny_llama(const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json")
      << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "vocab_size": 320, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
  "rope_theta": 10000.0, "torch_dtype": "float32"})";
  return dir;
}

std::string adapter(const fs::path& dir, int rank, uint64_t seed, int hidden = 64) {
  const ModelConfig c = tiny_llama_config(hidden);
  testing::write_peft_adapter(
      dir, c, testing::random_adapter(c, rank, 2.0 * rank, testing::all_targets(), seed, 0.3f));
  return dir.string();
}

TEST_F(E2e, LoraRunRecordsAdaptersPerRequest) {
  const std::string model = tiny_llama(root_ / "tiny").string();
  const std::string a = adapter(root_ / "a", 4, 1), b = adapter(root_ / "b", 8, 2);
  const fs::path dir = root_ / "result";
  ASSERT_EQ(run({"run",
                 "--model",
                 model,
                 "--load-format",
                 "dummy",
                 "--enable-lora",
                 "--max-loras",
                 "2",
                 "--max-lora-rank",
                 "8",
                 "--lora-modules",
                 "sql=" + a,
                 "chat=" + b,
                 "--lora-assignment",
                 "round-robin",
                 "--num-prompts",
                 "8",
                 "--input-len",
                 "16",
                 "--output-len",
                 "8",
                 "--batch-size",
                 "4",
                 "--runs",
                 "1",
                 "--result-dir",
                 dir.string(),
                 "--num-threads",
                 "2"}),
            0)
      << err();
  const json r = json::parse(read_file(dir / "result.json").value());
  ASSERT_TRUE(r.contains("lora_adapters")) << r.dump().substr(0, 2000);
  EXPECT_EQ(r["lora_adapters"]["sql"]["requests"], 4);
  EXPECT_EQ(r["lora_adapters"]["chat"]["requests"], 4);
  EXPECT_GT(r["lora_adapters"]["chat"]["output_throughput"].get<double>(), 0);
  EXPECT_EQ(r["config"]["lora_assignment"], "round-robin");
  EXPECT_EQ(r["config"]["lora"]["max_loras"], 2);
  std::ifstream lines(dir / "requests.jsonl");
  int sql = 0, chat = 0;
  for (std::string line; std::getline(lines, line);) {
    const json q = json::parse(line);
    if (q["warmup"].get<bool>()) continue;
    const std::string name = q["lora_adapter"];
    (name == "sql" ? sql : chat) += 1;
    EXPECT_EQ(name, q["prompt_index"].get<int>() % 2 == 0 ? "sql" : "chat");
  }
  EXPECT_EQ(sql, 4);
  EXPECT_EQ(chat, 4);
  EXPECT_NE(out().find("| LoRA adapter | requests |"), std::string::npos) << out();
}

TEST_F(E2e, LoraGenerateUnmergedEqualsMerged) {
  const std::string model = tiny_llama(root_ / "tiny").string();
  const std::string a = adapter(root_ / "a", 8, 3);
  auto tokens = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"generate",      "--model",      model,
                                     "--load-format", "dummy",        "--prompt-token-ids",
                                     "5,17,99,3,250", "--max-tokens", "12"};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(run(args), 0) << err();
    return json::parse(out())["token_ids"];
  };
  const json base = tokens({});
  const json unmerged = tokens({"--lora-modules", "a=" + a, "--max-lora-rank", "8"});
  const json merged = tokens({"--lora-modules", "a=" + a, "--merge-lora"});
  EXPECT_EQ(unmerged, merged);
  EXPECT_NE(unmerged, base);
}

TEST_F(E2e, LoraRefusalsExitTwoNamingTheFix) {
  const std::string model = tiny_llama(root_ / "tiny").string();
  const std::string big = adapter(root_ / "big", 8, 1);
  const std::string other = adapter(root_ / "other", 4, 1, 128);
  const std::vector<std::string> base = {
      "run",    "--model", model,          "--load-format",       "dummy", "--num-prompts", "2",
      "--runs", "1",       "--result-dir", (root_ / "r").string()};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  };
  EXPECT_EQ(with({"--enable-lora", "--max-lora-rank", "4", "--lora-modules", "x=" + big}), 2);
  EXPECT_NE(err().find("raise --max-lora-rank to at least 8"), std::string::npos) << err();
  EXPECT_EQ(with({"--enable-lora", "--lora-modules", "x=" + other}), 2);
  EXPECT_NE(err().find("[128, 4] but the base model"), std::string::npos) << err();
  EXPECT_NE(err().find("the adapter was trained for another base model"), std::string::npos);
  EXPECT_EQ(with({"--lora-modules", "x=" + big}), 2);
  EXPECT_NE(err().find("--lora-modules needs --enable-lora"), std::string::npos) << err();
  EXPECT_EQ(with({"--enable-lora", "--max-lora-rank", "8", "--lora-modules", "x=" + big,
                  "--lora-assignment", "zipf:0"}),
            2);
  EXPECT_NE(err().find("--lora-assignment zipf:0"), std::string::npos) << err();
}

}  // namespace
}  // namespace ib
