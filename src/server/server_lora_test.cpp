// LoRA over the server, as vLLM serves it: the request's model field picks an adapter (the same
// text as the adapter merged into the weights), /v1/models lists adapters with their parent, an
// unknown adapter is a 404 model_not_found, and adapters load and unload at run time within
// --max-loras.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/detail/lora_test_support.h"
#include "server/detail/test_support.h"
#include "server/server.h"

namespace ib {
namespace {

using nlohmann::json;
using testing::http_call;
using testing::RunningServer;

class ServerLora : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ib_server_lora_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    model_ = testing::tiny_engine().model;
    for (const char* name : {"a", "b", "c"}) {
      testing::write_peft_adapter(
          dir_ / name, model_,
          testing::random_adapter(model_, 8, 16, testing::all_targets(), name[0], 0.3f));
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  EngineGeneratorOptions options(bool merge) const {
    EngineGeneratorOptions o = testing::tiny_engine();
    o.engine.lora_modules = {"a=" + (dir_ / "a").string()};
    o.engine.merge_lora = merge;
    o.engine.enable_lora = !merge;
    o.engine.max_loras = 2;
    o.engine.max_lora_rank = 8;
    return o;
  }
  std::string path(const char* name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
  ModelConfig model_;
};

std::string completion(uint16_t port, const std::string& model, int* status = nullptr) {
  const auto r = http_call(
      port, "POST", "/v1/completions",
      json{{"model", model}, {"prompt", "Hello there"}, {"max_tokens", 8}, {"temperature", 0}}
          .dump());
  if (status != nullptr) *status = r.status;
  if (r.status != 200) return r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["model"], model);  // echoed as asked, as vLLM does
  return j["choices"][0]["text"];
}

TEST_F(ServerLora, ModelFieldSelectsTheAdapter) {
  RunningServer lora(make_engine_generator(options(false)));
  int status = 0;
  const std::string base = completion(lora.port(), "tiny-15m", &status);
  ASSERT_EQ(status, 200) << base;
  const std::string adapted = completion(lora.port(), "a", &status);
  ASSERT_EQ(status, 200) << adapted;
  RunningServer merged(make_engine_generator(options(true)));
  EXPECT_EQ(completion(merged.port(), "tiny-15m"), adapted);  // the same model, merged
  EXPECT_NE(adapted, base);
  const std::string missing = completion(lora.port(), "nope", &status);
  EXPECT_EQ(status, 404);
  EXPECT_NE(missing.find("model_not_found"), std::string::npos) << missing;
  EXPECT_NE(missing.find("'a' (LoRA)"), std::string::npos) << missing;
}

TEST_F(ServerLora, ModelsListAdaptersWithTheirParent) {
  RunningServer server(make_engine_generator(options(false)));
  const json models = json::parse(http_call(server.port(), "GET", "/v1/models").body);
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][0]["id"], "tiny-15m");
  EXPECT_TRUE(models["data"][0]["parent"].is_null());
  EXPECT_EQ(models["data"][1]["id"], "a");
  EXPECT_EQ(models["data"][1]["parent"], "tiny-15m");
  EXPECT_EQ(models["data"][1]["root"], path("a"));
}

TEST_F(ServerLora, LoadAndUnloadAtRunTime) {
  RunningServer server(make_engine_generator(options(false)));
  const uint16_t port = server.port();
  auto load = [&](const std::string& name, const std::string& p) {
    return http_call(port, "POST", "/v1/load_lora_adapter",
                     json{{"lora_name", name}, {"lora_path", p}}.dump());
  };
  auto unload = [&](const std::string& name) {
    return http_call(port, "POST", "/v1/unload_lora_adapter", json{{"lora_name", name}}.dump());
  };
  const auto loaded = load("b", path("b"));
  ASSERT_EQ(loaded.status, 200) << loaded.body;
  EXPECT_NE(loaded.body.find("Success: LoRA adapter 'b' added successfully"), std::string::npos);
  int status = 0;
  completion(port, "b", &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(json::parse(http_call(port, "GET", "/v1/models").body)["data"].size(), 3u);
  // Beyond --max-loras 2: refused, naming the flag.
  const auto full = load("c", path("c"));
  EXPECT_EQ(full.status, 400);
  EXPECT_NE(full.body.find("--max-loras"), std::string::npos) << full.body;
  EXPECT_EQ(load("b", path("b")).status, 400);  // already served
  const auto bad = load("d", path("nothing-here"));
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("not a directory"), std::string::npos) << bad.body;
  EXPECT_EQ(http_call(port, "POST", "/v1/load_lora_adapter", R"({"lora_name": "x"})").status, 400);
  EXPECT_EQ(http_call(port, "GET", "/v1/load_lora_adapter").status, 405);
  // Unload frees the slot; the name is then unknown.
  ASSERT_EQ(unload("b").status, 200);
  EXPECT_EQ(unload("b").status, 404);
  completion(port, "b", &status);
  EXPECT_EQ(status, 404);
  EXPECT_EQ(load("c", path("c")).status, 200);
}

TEST(ServerLoraOff, LoadingIsRefusedWithTheFlagToUse) {
  RunningServer server(make_engine_generator(testing::tiny_engine()));
  const auto r = http_call(server.port(), "POST", "/v1/load_lora_adapter",
                           R"({"lora_name": "a", "lora_path": "/tmp"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("--enable-lora"), std::string::npos) << r.body;
}

}  // namespace
}  // namespace ib
