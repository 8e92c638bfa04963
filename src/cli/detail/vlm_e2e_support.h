// Test support for the vision-language end-to-end tests (vlm_e2e_test, qwen2vl_e2e_test): `run`
// on a tiny checkpoint with the settings they share, and the check of an OpenAI-style 400.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/detail/serve_e2e_support.h"
#include "server/detail/test_support.h"

namespace ib::testing {

class VlmE2e : public ServeE2e {
 protected:
  // `run` on the checkpoint at model: one run, an 8 MiB KV cache, one thread, results in out.
  int run_vlm(const fs::path& model, std::vector<std::string> args, const fs::path& out) {
    args.insert(args.begin(), {"run", "--model", model.string()});
    args.insert(args.end(), {"--runs", "1", "--kv-cache-memory", "8MiB", "--num-threads", "1",
                             "--result-dir", out.string()});
    return run(std::move(args));
  }
  // A 400 whose error names param and says expect.
  static void expect_400(const HttpReply& r, const std::string& param, const std::string& expect) {
    ASSERT_EQ(r.status, 400) << r.body;
    const nlohmann::json e = nlohmann::json::parse(r.body)["error"];
    EXPECT_EQ(e["param"], param) << r.body;
    EXPECT_NE(e["message"].get<std::string>().find(expect), std::string::npos) << r.body;
  }
};

}  // namespace ib::testing
