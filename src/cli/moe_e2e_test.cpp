// End-to-end: a tiny MixtralForCausalLM directory (config.json, dummy weights) benchmarks on the
// CPU, also with its experts quantized at load; result.json records the routing (engine.routing)
// and expert_load.svg draws it; a router the engine cannot run and DeepSeek-V2's experts
// quantized exit 2 naming them; `plot --expert-load` redraws the
// heatmap from result.json. A tiny DeepseekV2ForCausalLM
// the same way, with its latent KV cache's bytes per token.
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/detail/e2e_support.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::E2e;

fs::path tiny_mixtral(const fs::path& dir, const std::string& extra = "") {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json")
      << R"({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
  "vocab_size": 320, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
  "num_local_experts": 8, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02,
  "rope_theta": 1000000.0, "sliding_window": null, "torch_dtype": "float32")"
      << extra << "}\n";
  return dir;
}

// A short benchmark of model (dummy weights) into dir.
std::vector<std::string> run_args(const fs::path& model, const fs::path& dir) {
  // clang-format off
  return {"run", "--model", model.string(), "--load-format", "dummy", "--num-prompts", "4",
          "--input-len", "16", "--output-len", "8", "--batch-size", "2", "--runs", "1",
          "--result-dir", dir.string(), "--num-threads", "2"};
  // clang-format on
}

TEST_F(E2e, MixtralRunRecordsTheRoutingAndDrawsIt) {
  const fs::path model = tiny_mixtral(root_ / "tiny-mixtral");
  const fs::path dir = root_ / "result";
  ASSERT_EQ(run(run_args(model, dir)), 0) << err();
  const json r = json::parse(read_file(dir / "result.json").value());
  const json& routing = r["engine"]["routing"];
  ASSERT_TRUE(routing.is_object()) << r["engine"].dump();
  EXPECT_EQ(routing["num_layers"], 2);
  EXPECT_EQ(routing["num_experts"], 8);
  EXPECT_EQ(routing["experts_per_token"], 2);
  ASSERT_EQ(routing["tokens_per_layer_expert"].size(), 2u);
  int64_t layer0 = 0;
  for (const auto& n : routing["tokens_per_layer_expert"][0]) layer0 += n.get<int64_t>();
  EXPECT_EQ(routing["tokens_routed"].get<int64_t>(), 2 * layer0);
  EXPECT_GT(layer0, 0);
  EXPECT_EQ(layer0 % 2, 0);  // two experts per token
  for (const auto& v : routing["load_imbalance_max_over_mean"]) {
    EXPECT_GE(v.get<double>(), 1.0);
    EXPECT_LT(v.get<double>(), 4.0);  // not collapsed: 4 would be one pair taking every token
  }
  const std::string svg = read_file(dir / "expert_load.svg").value();
  EXPECT_NE(svg.find("layer 1 expert 7:"), std::string::npos);
  EXPECT_NE(err().find("expert_load.svg"), std::string::npos) << err();

  // `plot --expert-load` draws the same heatmap again from result.json alone (results copied
  // back from elsewhere): the same cells and counts, under the result's model_id as title.
  const fs::path again = root_ / "copied" / "expert_load.svg";
  ASSERT_EQ(run({"plot", dir.string(), "--expert-load", "--out", again.string()}), 0) << err();
  const auto without_titles = [](std::string text) {
    std::string out, line;
    std::istringstream in(text);
    while (std::getline(in, line)) {
      if (line.find("Expert load: ") == std::string::npos) out += line + "\n";
    }
    return out;
  };
  const std::string redrawn = read_file(again).value();
  EXPECT_NE(redrawn.find("Expert load: "), std::string::npos);
  EXPECT_EQ(without_titles(redrawn), without_titles(svg));
  // Bad input: an .html output, two runs, a run without routing counts.
  EXPECT_EQ(run({"plot", dir.string(), "--expert-load", "--out", (root_ / "e.html").string()}), 2);
  EXPECT_NE(err().find("is an .svg"), std::string::npos) << err();
  EXPECT_EQ(run({"plot", dir.string(), dir.string(), "--expert-load", "--out", again.string()}), 2);
  EXPECT_NE(err().find("draws one run"), std::string::npos) << err();
  json dense = r;
  dense["engine"].erase("routing");
  fs::create_directories(root_ / "dense");
  std::ofstream(root_ / "dense" / "result.json") << dense.dump();
  EXPECT_EQ(run({"plot", (root_ / "dense").string(), "--expert-load", "--out", again.string()}), 2);
  EXPECT_NE(err().find("not a mixture-of-experts run"), std::string::npos) << err();
}

// generate --dump-routing: a step per generated token, each layer's two experts (distinct, in
// range) as a JSON file; a dense model has nothing to dump (exit 2, no file).
TEST_F(E2e, GenerateDumpsEachStepsRouting) {
  const fs::path model = tiny_mixtral(root_ / "tiny-mixtral");
  const fs::path dump = root_ / "routing.json";
  ASSERT_EQ(
      run({"generate", "--model", model.string(), "--load-format", "dummy", "--prompt-token-ids",
           "1,15,300,7", "--max-tokens", "5", "--dump-routing", dump.string()}),
      0)
      << err();
  const json r = json::parse(read_file(dump).value());
  EXPECT_EQ(r["num_layers"], 2);
  EXPECT_EQ(r["experts_per_token"], 2);
  ASSERT_EQ(r["steps"].size(), 5u);
  for (const auto& step : r["steps"]) {
    ASSERT_EQ(step.size(), 2u);
    for (const auto& layer : step) {
      ASSERT_EQ(layer.size(), 2u);
      const int a = layer[0].get<int>(), b = layer[1].get<int>();
      EXPECT_TRUE(a >= 0 && a < 8 && b >= 0 && b < 8 && a != b) << layer.dump();
    }
  }
  const fs::path none = root_ / "none.json";
  EXPECT_EQ(run({"generate", "--model", "tiny-15m", "--prompt-token-ids", "1", "--dump-routing",
                 none.string()}),
            2);
  EXPECT_NE(err().find("no mixture-of-experts layers"), std::string::npos) << err();
  EXPECT_FALSE(fs::exists(none));
}

TEST_F(E2e, MixtralRefusalsExitTwoNamingWhat) {
  const std::string dir = (root_ / "never").string();
  const fs::path sigmoid = tiny_mixtral(root_ / "sigmoid", R"(, "scoring_func": "sigmoid")");
  expect_refused(
      {"run", "--model", sigmoid.string(), "--load-format", "dummy", "--result-dir", dir},
      "router scoring_func 'sigmoid'", dir);
  // DeepSeek-V2's experts and latent attention run dense only.
  const fs::path deepseek = testing::tiny_deepseek_v2_dir(root_ / "deepseek", "softmax");
  expect_refused({"run", "--model", deepseek.string(), "--load-format", "dummy", "--quantization",
                  "int8", "--result-dir", dir},
                 "dense weights only for now (multi-head latent attention)", dir);
}

// Quantized experts on the CPU backend: the dummy experts quantized at load (int8 W8A16 and FP8
// W8A8), the run completes and result.json names the format.
TEST_F(E2e, MixtralRunsWithQuantizedExpertsOnTheCpu) {
  const fs::path plain = tiny_mixtral(root_ / "plain");
  for (const char* q : {"int8", "fp8"}) {
    const fs::path dir = root_ / (std::string("q-") + q);
    std::vector<std::string> args = run_args(plain, dir);
    args.insert(args.end(), {"--quantization", q});
    ASSERT_EQ(run(args), 0) << q << ": " << err();
    const json r = json::parse(read_file(dir / "result.json").value());
    EXPECT_EQ(r["config"]["quantization"], q);
    EXPECT_EQ(r["engine"]["routing"]["num_experts"], 8);
  }
}

// DeepSeek-V2's structure at toy sizes (e2e_support.h): the run completes; result.json records
// the latent KV cache beside what ordinary attention would take, and the routing (layer 0 dense).
TEST_F(E2e, DeepseekV2RunRecordsTheLatentCacheAndTheRouting) {
  const fs::path model = testing::tiny_deepseek_v2_dir(root_ / "tiny-deepseek-v2", "softmax");
  const fs::path dir = root_ / "result";
  ASSERT_EQ(run(run_args(model, dir)), 0) << err();
  const json r = json::parse(read_file(dir / "result.json").value());
  const json& e = r["engine"]["engine"];
  EXPECT_EQ(e["kv_layout"], "mla-latent");
  // 2 layers x (kv_lora_rank 32 + qk_rope_head_dim 8) fp32 values, against K (16 + 8) and V (12)
  // of 4 heads.
  EXPECT_EQ(e["kv_bytes_per_token"], 2 * (32 + 8) * 4);
  EXPECT_EQ(e["kv_bytes_per_token_gqa"], 2 * 4 * (24 + 12) * 4);
  EXPECT_EQ(e["kv_block_bytes"].get<int64_t>(),
            e["block_size"].get<int64_t>() * e["kv_bytes_per_token"].get<int64_t>());
  const json& routing = r["engine"]["routing"];
  ASSERT_TRUE(routing.is_object()) << r["engine"].dump();
  EXPECT_EQ(routing["num_experts"], 8);
  EXPECT_EQ(routing["experts_per_token"], 3);
  int64_t layer0 = 0, layer1 = 0;
  for (const auto& n : routing["tokens_per_layer_expert"][0]) layer0 += n.get<int64_t>();
  for (const auto& n : routing["tokens_per_layer_expert"][1]) layer1 += n.get<int64_t>();
  EXPECT_EQ(layer0, 0);  // first_k_dense_replace 1: a dense MLP
  EXPECT_GT(layer1, 0);
  EXPECT_EQ(layer1 % 3, 0);  // three experts per token
  EXPECT_TRUE(routing["load_imbalance_max_over_mean"][0].is_null());
}

TEST_F(E2e, DeepseekV2UnknownRouterExitsTwoNamingIt) {
  const std::string dir = (root_ / "never").string();
  const fs::path sigmoid = testing::tiny_deepseek_v2_dir(root_ / "sigmoid", "sigmoid");
  expect_refused(
      {"run", "--model", sigmoid.string(), "--load-format", "dummy", "--result-dir", dir},
      "router scoring_func 'sigmoid'", dir);
}

}  // namespace
}  // namespace ib
