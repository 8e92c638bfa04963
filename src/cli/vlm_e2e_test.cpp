// End to end with a tiny LLaVA checkpoint (seeded weights, the byte tokenizer). `serve` takes
// OpenAI chat image_url parts: data: URLs and file:// URLs under --allowed-local-media-path go
// through the vision tower, each becoming the model's visual tokens; every bad image is a 400
// naming its part; a text-only model refuses images by name. `run` benchmarks --dataset-name
// random-mm and JSONL lines with image files, and reports visual tokens, encoder time, the TTFT
// split and KV bytes per request and in result.json. Bad multimodal flags exit 2.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/detail/vlm_e2e_support.h"
#include "server/detail/test_support.h"
#include "vision/llava_checkpoint_test_support.h"
#include "vision/vision_test_support.h"

namespace ib::testing {
namespace {

using nlohmann::json;

// The tiny LLaVA (28 px images of 7 px patches: 16 visual tokens) with a vocabulary that covers
// the byte tokenizer (ids 3..258); the image token is 298.
const std::string kConfig =
    llava_test::tiny_llava_config(/*vocab_size=*/300, /*image_token_id=*/298);
constexpr int kVisualTokens = 16;

std::string png_url(int seed, int64_t size_px = 40) {
  const Image image = test::pattern_image(size_px, size_px, seed, /*noisy=*/true);
  return test::data_url("image/png", test::encode_png(image.rgb, size_px, size_px, 3));
}

json image_part(const std::string& url) {
  return {{"type", "image_url"}, {"image_url", {{"url", url}}}};
}

// A chat call whose one user message holds "describe" then the parts.
std::string chat(const std::vector<json>& parts, int max_tokens = 6) {
  json content = json::array({{{"type", "text"}, {"text", "describe "}}});
  for (const json& p : parts) content.push_back(p);
  return json{{"messages", {{{"role", "user"}, {"content", content}}}},
              {"max_tokens", max_tokens},
              {"temperature", 0},
              {"ignore_eos", true}}
      .dump();
}

class VlmServeE2e : public VlmE2e {
 protected:
  fs::path llava_dir() {
    const fs::path dir = root_ / "llava";
    if (!fs::exists(dir)) llava_test::write_tiny_llava(dir, kConfig, /*legacy=*/false);
    return dir;
  }
  // `run` on the tiny LLaVA, one run, its results in out.
  int run_llava(std::vector<std::string> args, const fs::path& out) {
    return run_vlm(llava_dir(), std::move(args), out);
  }
};

TEST_F(VlmServeE2e, ImagePartsBecomeVisualTokensAndBadOnesAreNamed) {
  const fs::path media = root_ / "media";
  fs::create_directories(media);
  const Image pattern = test::pattern_image(40, 40, 5, /*noisy=*/true);
  const auto png = test::encode_png(pattern.rgb, 40, 40, 3);
  std::ofstream(media / "a.png", std::ios::binary)
      .write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
  std::ofstream(root_ / "outside.png", std::ios::binary)
      .write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
  const uint16_t port = start_server({"--model", llava_dir().string(), "--kv-cache-memory", "8MiB",
                                      "--num-threads", "1", "--limit-mm-per-prompt", "image=2",
                                      "--allowed-local-media-path", media.string()});
  ASSERT_NE(port, 0);
  auto call = [&](const std::string& body) {
    return http_call(port, "POST", "/v1/chat/completions", body);
  };
  auto completion = [](const HttpReply& r) {
    return json::parse(r.body)["choices"][0]["message"]["content"].get<std::string>();
  };

  // Each image is 16 visual tokens in place of its part.
  const auto text_only = call(chat({}));
  ASSERT_EQ(text_only.status, 200) << text_only.body;
  const int text_tokens = json::parse(text_only.body)["usage"]["prompt_tokens"];
  const auto one = call(chat({image_part(png_url(5))}));
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(json::parse(one.body)["usage"]["prompt_tokens"], text_tokens + kVisualTokens);
  EXPECT_EQ(json::parse(one.body)["usage"]["completion_tokens"], 6);
  const auto two = call(chat({image_part(png_url(5)), image_part(png_url(9))}));
  ASSERT_EQ(two.status, 200) << two.body;
  EXPECT_EQ(json::parse(two.body)["usage"]["prompt_tokens"], text_tokens + 2 * kVisualTokens);
  const auto counted = http_call(port, "POST", "/tokenize", chat({image_part(png_url(5))}));
  ASSERT_EQ(counted.status, 200) << counted.body;
  EXPECT_EQ(json::parse(counted.body)["count"], text_tokens + kVisualTokens);

  // The pixels reach the model: a black and a white image change the greedy completion, the same
  // pixels from a file:// URL give the same one.
  auto solid_url = [](uint8_t v) {
    return test::data_url("image/png",
                          test::encode_png(std::vector<uint8_t>(28 * 28 * 3, v), 28, 28, 3));
  };
  const auto on_black = call(chat({image_part(solid_url(0))}, 16));
  const auto on_white = call(chat({image_part(solid_url(255))}, 16));
  ASSERT_EQ(on_black.status, 200) << on_black.body;
  ASSERT_EQ(on_white.status, 200) << on_white.body;
  EXPECT_NE(completion(on_black), completion(on_white));
  const auto from_file = call(chat({image_part("file://" + (media / "a.png").string())}));
  ASSERT_EQ(from_file.status, 200) << from_file.body;
  EXPECT_EQ(completion(from_file), completion(one));

  // Bad images: a 400 naming the part, and the server goes on.
  expect_400(call(chat({image_part(png_url(1)), image_part(png_url(2)), image_part(png_url(3))})),
             "messages[0].content[3]", "more than 2 image(s)");
  expect_400(call(chat({image_part("data:image/png;base64,@@@@")})), "messages[0].content[1]",
             "base64");
  expect_400(call(chat({image_part(
                 test::data_url("image/gif", {'G', 'I', 'F', '8', '9', 'a', 0, 0, 0, 0}))})),
             "messages[0].content[1]", "image/gif is not supported");
  expect_400(call(chat({image_part("https://example.com/cat.png")})), "messages[0].content[1]",
             "only data: URLs");
  expect_400(call(chat({image_part("file://" + (root_ / "outside.png").string())})),
             "messages[0].content[1]", "outside --allowed-local-media-path");
  const std::vector<uint8_t> black(4100 * 4100 * 3, 0);  // over 4096 x 4096, a small PNG
  expect_400(
      call(chat({image_part(test::data_url("image/png", test::encode_png(black, 4100, 4100, 3)))})),
      "messages[0].content[1]", "over the cap");
  const auto after = call(chat({image_part(png_url(5))}));
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(completion(after), completion(one));
}

TEST_F(VlmServeE2e, ATextOnlyModelRefusesImagesByName) {
  const uint16_t port =
      start_server({"--model", "tiny-15m", "--kv-cache-memory", "16MiB", "--num-threads", "1"});
  ASSERT_NE(port, 0);
  expect_400(http_call(port, "POST", "/v1/chat/completions", chat({image_part(png_url(5))})),
             "messages[0].content[1]", "no vision tower");
}

TEST_F(VlmServeE2e, BadMultimodalFlagsExit2) {
  const std::string dir = llava_dir().string();
  expect_refused({"serve", "--model", dir, "--limit-mm-per-prompt", "video=1"},
                 "modality \"video\" is not supported", root_ / "none");
  expect_refused({"serve", "--model", dir, "--limit-mm-per-prompt", "image=lots"},
                 "is not an integer", root_ / "none");
  expect_refused(
      {"serve", "--model", dir, "--allowed-local-media-path", (root_ / "missing").string()},
      "not a directory", root_ / "none");
  expect_refused({"serve", "--model", "tiny-15m", "--limit-mm-per-prompt", "image=2"},
                 "takes text only", root_ / "none");
}

// The tiny model's KV cache bytes per token: 2 layers x (K, V) x 2 KV heads x 16 dims x fp32.
constexpr int64_t kKvBytesPerToken = 2 * 2 * 2 * 16 * 4;

TEST_F(VlmServeE2e, RunRandomMmReportsVisualTokensEncoderTimeTheTtftSplitAndKvBytes) {
  const fs::path out = root_ / "mm";
  ASSERT_EQ(run_llava({"--dataset-name", "random-mm", "--random-mm-base-items-per-request", "2",
                       "--random-mm-bucket-config", "{(30, 40, 1): 1}", "--num-prompts", "4",
                       "--input-len", "64", "--output-len", "4", "--batch-size", "2"},
                      out),
            0)
      << err();
  const json result = json::parse(text_of(out / "result.json"));
  // A random text token that is the image token (298) does not count as a visual one.
  EXPECT_EQ(result["completed"], 4);
  EXPECT_EQ(result["failed"], 0);
  EXPECT_EQ(result["total_visual_tokens"], 4 * 2 * kVisualTokens);
  EXPECT_EQ(result["mean_visual_tokens"], 2 * kVisualTokens);
  EXPECT_EQ(result["total_input_tokens"], 4 * (64 + 2 * kVisualTokens));
  EXPECT_GT(result["mean_encode_ms"].get<double>(), 0);
  EXPECT_GE(result["mean_ttft_queue_ms"].get<double>(), 0);
  EXPECT_GT(result["mean_ttft_prefill_ms"].get<double>(), 0);
  EXPECT_EQ(result["mean_kv_bytes"], kKvBytesPerToken * (64 + 2 * kVisualTokens + 4));
  EXPECT_EQ(result["mean_visual_kv_bytes"], kKvBytesPerToken * 2 * kVisualTokens);
  const std::vector<json> lines = measured_lines(out);
  ASSERT_EQ(lines.size(), 4u);
  for (const json& j : lines) {
    EXPECT_EQ(j["visual_tokens"], 2 * kVisualTokens) << j;
    EXPECT_EQ(j["kv_bytes"], kKvBytesPerToken * (j["n_in"].get<int>() + j["n_out"].get<int>()));
    // queue + encode + prefill is the TTFT.
    const double sum = j["ttft_queue_ms"].get<double>() + j["encode_ms"].get<double>() +
                       j["ttft_prefill_ms"].get<double>();
    EXPECT_NEAR(sum, j["ttft_ms"].get<double>(), 1e-6) << j;
    EXPECT_GT(j["encode_ms"].get<double>(), 0) << j;
  }
}

TEST_F(VlmServeE2e, RunJsonlLinesWithImageFiles) {
  const Image pattern = test::pattern_image(40, 30, 5, /*noisy=*/true);
  const auto png = test::encode_png(pattern.rgb, 40, 30, 3);
  const auto jpeg = test::encode_jpeg(pattern.rgb, 40, 30, 3, 90);
  std::ofstream(root_ / "a.png", std::ios::binary)
      .write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
  std::ofstream(root_ / "b.jpg", std::ios::binary)
      .write(reinterpret_cast<const char*>(jpeg.data()), static_cast<std::streamsize>(jpeg.size()));
  std::ofstream(root_ / "data.jsonl") << R"({"prompt": "what is this?", "image": "a.png"}
{"prompt": "and these?", "images": ["a.png", "b.jpg"]}
{"prompt": "no image here"}
)";
  const fs::path out = root_ / "jsonl";
  ASSERT_EQ(run_llava({"--dataset-name", "jsonl", "--dataset-path", (root_ / "data.jsonl").string(),
                       "--num-prompts", "3", "--output-len", "3", "--batch-size", "3",
                       "--num-warmups", "0"},
                      out),
            0)
      << err();
  const std::vector<json> lines = measured_lines(out);
  ASSERT_EQ(lines.size(), 3u);
  std::map<int, json> by_prompt;
  for (const json& j : lines) by_prompt[j["prompt_index"].get<int>()] = j;
  EXPECT_EQ(by_prompt[0]["visual_tokens"], kVisualTokens);
  EXPECT_EQ(by_prompt[0]["n_in"], 13 + kVisualTokens);  // "what is this?" is 13 bytes, no BOS
  EXPECT_EQ(by_prompt[1]["visual_tokens"], 2 * kVisualTokens);
  EXPECT_FALSE(by_prompt[2].contains("visual_tokens"));
  const json result = json::parse(text_of(out / "result.json"));
  EXPECT_EQ(result["total_visual_tokens"], 3 * kVisualTokens);
}

TEST_F(VlmServeE2e, BadImageWorkloadsExit2) {
  const std::string dir = llava_dir().string();
  const fs::path never = root_ / "never";
  const std::vector<std::string> common = {"--num-prompts", "2",           "--runs", "1",
                                           "--result-dir",  never.string()};
  auto args = [&](std::vector<std::string> a) {
    a.insert(a.begin(), "run");
    a.insert(a.end(), common.begin(), common.end());
    return a;
  };
  expect_refused(args({"--model", "tiny-15m", "--dataset-name", "random-mm"}), "takes text only",
                 never);
  expect_refused(args({"--model", dir, "--dataset-name", "random-mm", "--random-mm-bucket-config",
                       "{(256, 256, 16): 1}"}),
                 "only images", never);
  expect_refused(
      args({"--model", dir, "--dataset-name", "random-mm", "--random-mm-base-items-per-request",
            "3", "--random-mm-limit-mm-per-prompt", "image=2"}),
      "over --random-mm-limit-mm-per-prompt's 2", never);
  expect_refused(args({"--model", dir, "--random-mm-base-items-per-request", "2"}),
                 "apply to --dataset-name random-mm only", never);
  std::ofstream(root_ / "missing.jsonl") << R"({"prompt": "x", "image": "nowhere.png"})"
                                         << "\n";
  expect_refused(args({"--model", dir, "--dataset-name", "jsonl", "--dataset-path",
                       (root_ / "missing.jsonl").string()}),
                 "missing.jsonl:1: image", never);
}

}  // namespace
}  // namespace ib::testing
