// End to end: `run --backend openai-chat` against `inferbench serve` on a tiny LLaVA (seeded
// weights, the byte tokenizer) sends each request's images as image_url data: URL parts, random-mm
// images and JSONL image files alike: the server counts each image's visual tokens in the
// request's usage, and every request succeeds. --backend openai (completions) refuses a workload
// with images before any request goes out (exit 2), as does a JSONL image neither PNG nor JPEG.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/detail/serve_e2e_support.h"
#include "server/detail/test_support.h"
#include "vision/llava_checkpoint_test_support.h"
#include "vision/vision_test_support.h"

namespace ib::testing {
namespace {

using nlohmann::json;

// The tiny LLaVA (28 px images of 7 px patches: 16 visual tokens per image, whatever its size)
// with a vocabulary that covers the byte tokenizer; the image token is 298.
const std::string kConfig =
    llava_test::tiny_llava_config(/*vocab_size=*/300, /*image_token_id=*/298);
constexpr int kVisualTokens = 16;

class RunChatImagesE2e : public ServeE2e {
 protected:
  void SetUp() override {
    ServeE2e::SetUp();
    llava_ = root_ / "llava";
    llava_test::write_tiny_llava(llava_, kConfig, /*legacy=*/false);
    port_ = start_server({"--model", llava_.string(), "--kv-cache-memory", "8MiB", "--num-threads",
                          "1", "--limit-mm-per-prompt", "image=2"});
  }
  // `run` against the server, one run without warm-ups, its results in root_/name.
  fs::path run_http(const std::string& name, std::vector<std::string> args,
                    const std::string& backend = "openai-chat") {
    const fs::path out = root_ / name;
    args.insert(args.begin(),
                {"run", "--backend", backend, "--base-url", url(), "--model", llava_.string()});
    args.insert(args.end(), {"--runs", "1", "--num-warmups", "0", "--result-dir", out.string()});
    EXPECT_EQ(run(std::move(args)), 0) << name << ": " << err();
    return out;
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // The server's prompt tokens per prompt (its usage.prompt_tokens, the records' n_in); every
  // request succeeded.
  static std::map<int, int> prompt_tokens_by_prompt(const fs::path& out, int requests) {
    const json result = json::parse(text_of(out / "result.json"));
    EXPECT_EQ(result["completed"], requests) << out;
    EXPECT_EQ(result["failed"], 0) << out;
    std::map<int, int> n_in;
    for (const json& j : measured_lines(out)) {
      EXPECT_EQ(j["ok"], true) << j;
      n_in[j["prompt_index"].get<int>()] = j["n_in"].get<int>();
    }
    EXPECT_EQ(n_in.size(), static_cast<size_t>(requests)) << out;
    return n_in;
  }
  // The server's own count of prompt tokens it prefilled (its /metrics).
  double server_prefill_tokens() const {
    const std::string metrics = http_call(port_, "GET", "/metrics").body;
    std::smatch m;
    static const std::regex kLine(R"(\ninferbench_tokens_total\{[^}]*phase="prefill"\} (\S+))");
    return std::regex_search(metrics, m, kLine) ? std::stod(m[1]) : -1;
  }
  static int total_n_in(const std::map<int, int>& n_in) {
    int sum = 0;
    for (const auto& [prompt, n] : n_in) sum += n;
    return sum;
  }
  void write_file(const std::string& name, const std::vector<uint8_t>& bytes) const {
    std::ofstream(root_ / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }

  fs::path llava_;
  uint16_t port_ = 0;
};

TEST_F(RunChatImagesE2e, RandomMmImagesReachTheServerAsVisualTokens) {
  ASSERT_NE(port_, 0);
  // The same prompts (random-mm's text is random's for a seed), then with two images each.
  const std::vector<std::string> common = {"--num-prompts", "4", "--input-len",       "12",
                                           "--output-len",  "3", "--max-concurrency", "2",
                                           "--seed",        "5"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), common.begin(), common.end());
    return more;
  };
  const auto text =
      prompt_tokens_by_prompt(run_http("text", with({"--dataset-name", "random"})), 4);
  const fs::path mm_dir =
      run_http("mm", with({"--dataset-name", "random-mm", "--random-mm-base-items-per-request", "2",
                           "--random-mm-bucket-config", "{(30, 40, 1): 0.5, (64, 48, 1): 0.5}"}));
  const auto mm = prompt_tokens_by_prompt(mm_dir, 4);
  for (const auto& [prompt, n] : mm) {
    EXPECT_EQ(n, text.at(prompt) + 2 * kVisualTokens) << "prompt " << prompt;
  }
  EXPECT_EQ(server_prefill_tokens(), total_n_in(text) + total_n_in(mm));

  // What the client sent is described; the visual tokens are the server's, not invented here.
  const json result = json::parse(text_of(mm_dir / "result.json"));
  const json& images = result["engine"]["images"];
  EXPECT_EQ(images["requests_with_images"], 4) << images;
  EXPECT_EQ(images["image_parts_sent"], 8) << images;
  EXPECT_EQ(images["distinct_images"], 8) << images;
  EXPECT_GT(images["data_url_bytes"].get<int64_t>(), 8 * 30 * 40 * 3) << images;
  EXPECT_FALSE(result.contains("total_visual_tokens")) << result.dump();
  EXPECT_EQ(result["engine"]["token_counts"]["input_len_mismatch"], 0);
}

TEST_F(RunChatImagesE2e, JsonlImageFilesReachTheServerAsVisualTokens) {
  ASSERT_NE(port_, 0);
  const Image pattern = test::pattern_image(40, 30, 5, /*noisy=*/true);
  write_file("a.png", test::encode_png(pattern.rgb, 40, 30, 3));
  write_file("b.jpg", test::encode_jpeg(pattern.rgb, 40, 30, 3, 90));
  std::ofstream(root_ / "images.jsonl") << R"({"prompt": "what is this?", "image": "a.png"}
{"prompt": "and these?", "images": ["a.png", "b.jpg"]}
{"prompt": "no image here"}
)";
  std::ofstream(root_ / "text.jsonl") << R"({"prompt": "what is this?"}
{"prompt": "and these?"}
{"prompt": "no image here"}
)";
  auto jsonl = [&](const std::string& file) {
    return std::vector<std::string>{
        "--dataset-name", "jsonl", "--dataset-path", (root_ / file).string(),
        "--num-prompts",  "3",     "--output-len",   "3"};
  };
  const auto text = prompt_tokens_by_prompt(run_http("text", jsonl("text.jsonl")), 3);
  const fs::path dir = run_http("images", jsonl("images.jsonl"));
  const auto with_images = prompt_tokens_by_prompt(dir, 3);
  EXPECT_EQ(with_images.at(0), text.at(0) + kVisualTokens);
  EXPECT_EQ(with_images.at(1), text.at(1) + 2 * kVisualTokens);
  EXPECT_EQ(with_images.at(2), text.at(2));
  const json images = json::parse(text_of(dir / "result.json"))["engine"]["images"];
  EXPECT_EQ(images["distinct_images"], 2) << images;  // a.png once
  EXPECT_EQ(images["image_parts_sent"], 3) << images;
}

TEST_F(RunChatImagesE2e, WorkloadsTheServerCannotTakeExit2BeforeAnyRequest) {
  ASSERT_NE(port_, 0);
  const double before = server_prefill_tokens();
  const fs::path never = root_ / "never";
  auto args = [&](const std::string& backend, std::vector<std::string> more) {
    more.insert(more.begin(), {"run", "--backend", backend, "--base-url", url(), "--model",
                               llava_.string(), "--num-prompts", "2", "--runs", "1"});
    more.insert(more.end(), {"--result-dir", never.string()});
    return more;
  };
  expect_refused(args("openai", {"--dataset-name", "random-mm"}), "use --backend openai-chat",
                 never);
  write_file("c.gif", {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0});
  std::ofstream(root_ / "gif.jsonl") << R"({"prompt": "x", "image": "c.gif"})"
                                     << "\n";
  expect_refused(args("openai-chat", {"--dataset-name", "jsonl", "--dataset-path",
                                      (root_ / "gif.jsonl").string()}),
                 "c.gif is image/gif; servers take PNG or JPEG", never);
  EXPECT_EQ(server_prefill_tokens(), before);
}

}  // namespace
}  // namespace ib::testing
