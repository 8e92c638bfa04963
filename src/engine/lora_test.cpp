// PEFT adapter parsing: the fields, the tensors in the engine's layout, and every refusal with
// the names and shapes a user needs; --lora-modules items.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/detail/checkpoint_test_support.h"
#include "engine/detail/engine_test_support.h"
#include "engine/detail/lora_test_support.h"
#include "engine/lora.h"

namespace ib {
namespace {

using testing::random_adapter;
using testing::TempDir;
using testing::write_peft_adapter;

TEST(LoraAdapter, ReadsConfigAndTensors) {
  TempDir tmp;
  const ModelConfig c = testing::tiny_config();
  const auto p = random_adapter(c, 4, 16, {"q_proj", "v_proj", "down_proj"}, 3);
  write_peft_adapter(tmp.path() / "a", c, p);
  auto a = load_lora_adapter((tmp.path() / "a").string(), c, 16);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->rank, 4);
  EXPECT_FLOAT_EQ(a->scale, 4.0f);  // alpha / r
  EXPECT_EQ(a->target_modules, (std::vector<std::string>{"down_proj", "q_proj", "v_proj"}));
  ASSERT_EQ(a->layers.size(), 2u);
  const auto& q = a->layers[1][static_cast<size_t>(LoraTarget::kQ)];
  EXPECT_EQ(q.a, p.modules.at("model.layers.1.self_attn.q_proj").a);
  EXPECT_EQ(q.b, p.modules.at("model.layers.1.self_attn.q_proj").b);
  EXPECT_TRUE(a->layers[0][static_cast<size_t>(LoraTarget::kK)].empty());
  EXPECT_FALSE(a->layers[0][static_cast<size_t>(LoraTarget::kDown)].empty());
}

TEST(LoraAdapter, RsLoraScalesBySqrtRank) {
  TempDir tmp;
  const ModelConfig c = testing::tiny_config();
  auto p = random_adapter(c, 4, 16, {"o_proj"}, 3);
  p.use_rslora = true;
  write_peft_adapter(tmp.path() / "a", c, p);
  auto a = load_lora_adapter((tmp.path() / "a").string(), c, 16);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_FLOAT_EQ(a->scale, 8.0f);  // 16 / sqrt(4)
}

TEST(LoraAdapter, TargetShapesFollowTheFusedLayout) {
  const ModelConfig c = testing::tiny_config();  // D 64, Q 64, KV 32, F 128
  EXPECT_EQ(lora_target_shape(c, LoraTarget::kK).row_offset, 64);
  EXPECT_EQ(lora_target_shape(c, LoraTarget::kV).row_offset, 96);
  EXPECT_EQ(lora_target_shape(c, LoraTarget::kUp).row_offset, 128);
  EXPECT_EQ(lora_target_shape(c, LoraTarget::kDown).in, 128);
}

// The error of loading p (written for writer's config) into c, or "" when it loads.
std::string load_error(const TempDir& tmp, const ModelConfig& c, const testing::PeftAdapter& p,
                       int max_rank = 16, const ModelConfig* writer = nullptr) {
  write_peft_adapter(tmp.path() / "bad", writer ? *writer : c, p);
  auto a = load_lora_adapter((tmp.path() / "bad").string(), c, max_rank);
  std::filesystem::remove_all(tmp.path() / "bad");
  return a.ok() ? "" : a.error().message;
}

TEST(LoraAdapter, RefusesWhatItCannotServe) {
  TempDir tmp;
  const ModelConfig c = testing::tiny_config();
  const auto good = random_adapter(c, 4, 8, {"q_proj"}, 1);
  auto with = [&](nlohmann::json extra) {
    auto p = good;
    p.extra_config = std::move(extra);
    return p;
  };
  EXPECT_NE(load_error(tmp, c, with({{"bias", "lora_only"}})).find("retrain with bias=\"none\""),
            std::string::npos);
  EXPECT_NE(load_error(tmp, c, with({{"modules_to_save", {"lm_head"}}})).find("modules_to_save"),
            std::string::npos);
  EXPECT_NE(load_error(tmp, c, with({{"use_dora", true}})).find("DoRA"), std::string::npos);
  EXPECT_NE(load_error(tmp, c, with({{"peft_type", "IA3"}})).find("not LORA"), std::string::npos);
  EXPECT_NE(load_error(tmp, c, with({{"target_modules", {"q_proj", "lm_head"}}}))
                .find("\"lm_head\", which the engine cannot adapt"),
            std::string::npos);
  // Rank above --max-lora-rank: names both and the fix.
  const std::string rank = load_error(tmp, c, good, 2);
  EXPECT_NE(rank.find("rank r = 4 exceeds --max-lora-rank 2; raise --max-lora-rank"),
            std::string::npos)
      << rank;
  // A tensor for a target the config does not list.
  EXPECT_NE(load_error(tmp, c, with({{"target_modules", {"k_proj"}}})).find("does not list"),
            std::string::npos);
}

TEST(LoraAdapter, RefusesAnAdapterForAnotherBaseWithNamesAndShapes) {
  TempDir tmp;
  const ModelConfig c = testing::tiny_config();
  ModelConfig other = c;
  other.name = "wider-model";
  other.hidden_size = 96;
  const auto p = random_adapter(other, 4, 8, {"q_proj"}, 1);
  const std::string e = load_error(tmp, c, p, 16, &other);
  EXPECT_NE(e.find("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight has shape "
                   "[4, 96] but the base model tiny-test with r = 4 needs [4, 64]"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("wider-model"), std::string::npos) << e;  // its recorded base
  ModelConfig deeper = c;
  deeper.num_layers = 3;
  const std::string layers =
      load_error(tmp, c, random_adapter(deeper, 4, 8, {"o_proj"}, 1), 16, &deeper);
  EXPECT_NE(layers.find("is for layer 2 but the base model has 2 layers"), std::string::npos)
      << layers;
}

TEST(LoraAdapter, RefusesIncompleteOrMissingFiles) {
  TempDir tmp;
  const ModelConfig c = testing::tiny_config();
  auto missing = load_lora_adapter((tmp.path() / "nothing").string(), c, 16);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("not a directory"), std::string::npos);
  std::filesystem::create_directories(tmp.path() / "empty");
  auto empty = load_lora_adapter((tmp.path() / "empty").string(), c, 16);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message.find("no adapter_config.json"), std::string::npos);
  // lora_A without its lora_B.
  auto p = random_adapter(c, 4, 8, {"q_proj"}, 1);
  write_peft_adapter(tmp.path() / "half", c, p);
  auto reopened =
      SafetensorsCheckpoint::open((tmp.path() / "half" / "adapter_model.safetensors").string());
  ASSERT_TRUE(reopened.ok());
  std::vector<SafetensorsWriteTensor> kept;
  for (const std::string& name : (*reopened)->names()) {
    if (name.find("layers.1") != std::string::npos && name.find("lora_B") != std::string::npos) {
      continue;
    }
    auto t = (*reopened)->get(name);
    kept.push_back(
        {name, t->dtype, t->shape,
         std::string(static_cast<const char*>(t->data), static_cast<size_t>(t->numel()) * 4)});
  }
  reopened->reset();
  ASSERT_TRUE(
      write_safetensors((tmp.path() / "half" / "adapter_model.safetensors").string(), kept).ok());
  auto half = load_lora_adapter((tmp.path() / "half").string(), c, 16);
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.error().message.find("layer 1 q_proj has lora_A but no lora_B"), std::string::npos)
      << half.error().message;
}

TEST(LoraModules, ParsesNameEqualsPath) {
  auto m = parse_lora_module("sql=/adapters/sql");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->name, "sql");
  EXPECT_EQ(m->path, "/adapters/sql");
  EXPECT_FALSE(parse_lora_module("sql").ok());
  EXPECT_FALSE(parse_lora_module("=x").ok());
  EXPECT_FALSE(parse_lora_module("x=").ok());
}

}  // namespace
}  // namespace ib
