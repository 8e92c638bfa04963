// Chat requests' images: image_url parts after the text, in the request's order, each a data: URL
// of the file's own bytes (PNG or JPEG by its magic) or of a random image as PNG; other formats
// refused by name; completions refuse images, naming --backend openai-chat.
#include "targets/chat_images.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "vision/detail/base64.h"
#include "vision/image.h"
#include "vision/vision_test_support.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class ChatImages : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ib_chat_images_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) {
    const fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return path.string();
  }
  fs::path dir_;
};

// The media type and bytes of a data: URL.
std::pair<std::string, std::vector<uint8_t>> split_data_url(const std::string& url) {
  const size_t comma = url.find(";base64,");
  EXPECT_EQ(url.rfind("data:", 0), 0u);
  auto bytes = detail::decode_base64(std::string_view(url).substr(comma + 8));
  EXPECT_TRUE(bytes.ok());
  return {url.substr(5, comma - 5), bytes.ok() ? *bytes : std::vector<uint8_t>{}};
}

OpenAITargetOptions chat_options() {
  OpenAITargetOptions o;
  o.chat = true;
  o.model = "llava";
  return o;
}

TEST_F(ChatImages, PartsFollowTheTextInTheRequestsOrder) {
  const Image pattern = test::pattern_image(20, 10, 3);
  const auto jpeg = test::encode_jpeg(pattern.rgb, 20, 10, 3, 90);
  const auto png = test::encode_png(pattern.rgb, 20, 10, 3);
  RequestSpec r;
  r.id = 4;
  r.prompt_text = "what is \"this\"?";
  r.output_len = 3;
  r.images = {RequestImage{write("a.jpg", jpeg), 0, 0, 0}, RequestImage{"", 30, 17, 99},
              RequestImage{write("b.png", png), 0, 0, 0}};
  RequestSpec again = r;  // the same images in another request: built once
  again.id = 5;

  OpenAITargetOptions o = chat_options();
  o.extra_body = R"({"top_k": 3})";
  auto prepare = http_image_preparation(o);
  std::vector<RequestSpec> requests = {r, again};
  ASSERT_TRUE(prepare(requests).ok());
  ASSERT_NE(o.image_urls, nullptr);
  EXPECT_EQ(o.image_urls->describe()["distinct_images"], 3);

  auto body = openai_request_body(o, Dialect::kVllm, r);
  ASSERT_TRUE(body.ok()) << body.error().message;
  const json j = json::parse(*body);
  EXPECT_EQ(j["top_k"], 3);
  EXPECT_EQ(j["max_tokens"], 3);
  EXPECT_EQ(j["stream"], true);
  ASSERT_EQ(j["messages"].size(), 1u);
  EXPECT_EQ(j["messages"][0]["role"], "user");
  const json& content = j["messages"][0]["content"];
  ASSERT_EQ(content.size(), 4u);
  EXPECT_EQ(content[0], json({{"type", "text"}, {"text", "what is \"this\"?"}}));
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(content[i]["type"], "image_url");

  const auto [jpeg_type, jpeg_bytes] = split_data_url(content[1]["image_url"]["url"]);
  EXPECT_EQ(jpeg_type, "image/jpeg");
  EXPECT_EQ(jpeg_bytes, jpeg);
  const auto [random_type, random_bytes] = split_data_url(content[2]["image_url"]["url"]);
  EXPECT_EQ(random_type, "image/png");
  auto random = decode_image(random_bytes, {});
  ASSERT_TRUE(random.ok()) << random.error().message;
  EXPECT_EQ(random->width_px, 30);
  EXPECT_EQ(random->height_px, 17);
  Rng rng(99);  // the random-mm draw: one byte per sample from the image's seed
  for (size_t i = 0; i < 8; ++i)
    EXPECT_EQ(random->rgb[i], static_cast<uint8_t>(rng.next_u64() >> 56));
  const auto [png_type, png_bytes] = split_data_url(content[3]["image_url"]["url"]);
  EXPECT_EQ(png_type, "image/png");
  EXPECT_EQ(png_bytes, png);
}

TEST_F(ChatImages, OtherFormatsAreRefusedByName) {
  RequestSpec r;
  r.id = 2;
  r.images = {RequestImage{write("c.gif", {'G', 'I', 'F', '8', '9', 'a', 0, 0}), 0, 0, 0}};
  OpenAITargetOptions o = chat_options();
  std::vector<RequestSpec> requests = {r};
  const Status s = http_image_preparation(o)(requests);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kUser);
  EXPECT_NE(
      s.error().message.find("request 2: image " + (dir_ / "c.gif").string() + " is image/gif"),
      std::string::npos)
      << s.error().message;
}

TEST_F(ChatImages, CompletionsRefuseImagesNamingTheChatBackend) {
  RequestSpec text;
  text.prompt_text = "hello";
  RequestSpec with_image = text;
  with_image.id = 1;
  with_image.images = {RequestImage{"", 8, 8, 1}};
  OpenAITargetOptions o;  // completions
  auto prepare = http_image_preparation(o);
  std::vector<RequestSpec> only_text = {text};
  EXPECT_TRUE(prepare(only_text).ok());
  std::vector<RequestSpec> both = {text, with_image};
  const Status s = prepare(both);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kUser);
  EXPECT_NE(s.error().message.find("use --backend openai-chat"), std::string::npos)
      << s.error().message;
  EXPECT_EQ(o.image_urls, nullptr);
  auto body = openai_request_body(o, Dialect::kVllm, with_image);
  ASSERT_FALSE(body.ok());
  EXPECT_NE(body.error().message.find("--backend openai-chat"), std::string::npos);
}

TEST_F(ChatImages, ImagesNotPreparedAreAnError) {
  RequestSpec r;
  r.images = {RequestImage{"", 8, 8, 1}};
  auto body = openai_request_body(chat_options(), Dialect::kVllm, r);
  ASSERT_FALSE(body.ok());
  EXPECT_NE(body.error().message.find("not prepared"), std::string::npos);
}

}  // namespace
}  // namespace ib
