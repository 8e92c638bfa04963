// Image URLs and chat content parts: data: URLs decode, other URLs and local files are refused
// unless allowed, bad base64 and types name the problem, and the per-prompt limit names the part.
#include "vision/image_input.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "vision/vision_test_support.h"

namespace ib {
namespace {

using nlohmann::json;

std::string png_url(int seed = 0) {
  const Image image = test::pattern_image(4, 3, seed);
  return test::data_url("image/png", test::encode_png(image.rgb, 4, 3, 3));
}

json image_part(const std::string& url) {
  return json{{"type", "image_url"}, {"image_url", {{"url", url}}}};
}

std::string error_of(const Result<Image>& r) {
  return r.ok() ? "(ok)" : r.error().message;
}

TEST(ImageUrl, DataUrlsDecode) {
  auto png = load_image_url(png_url(7), {});
  ASSERT_TRUE(png.ok()) << png.error().message;
  EXPECT_EQ(png->rgb, test::pattern_image(4, 3, 7).rgb);
  const std::vector<uint8_t> gray(64, 200);
  auto jpeg =
      load_image_url(test::data_url("image/jpeg", test::encode_jpeg(gray, 8, 8, 1, 95)), {});
  ASSERT_TRUE(jpeg.ok()) << jpeg.error().message;
  EXPECT_EQ(jpeg->width_px, 8);
}

TEST(ImageUrl, MalformedDataUrlsNameTheProblem) {
  EXPECT_NE(error_of(load_image_url("data:image/png;base64", {})).find("no ','"),
            std::string::npos);
  EXPECT_NE(error_of(load_image_url("data:image/png,iVBO", {})).find("not base64"),
            std::string::npos);
  EXPECT_NE(error_of(load_image_url("data:text/plain;base64,aGVsbG8=", {}))
                .find("\"text/plain\" is not an image"),
            std::string::npos);
  EXPECT_NE(error_of(load_image_url("data:image/png;base64,iVB!", {}))
                .find("unexpected character at offset 3"),
            std::string::npos);
  EXPECT_NE(error_of(load_image_url("data:image/png;base64,iVBOR", {})).find("multiple of 4"),
            std::string::npos);
  EXPECT_NE(error_of(load_image_url("data:image/png;base64,iV==iVBO", {})).find("offset 2"),
            std::string::npos);
  // Valid base64 of bytes that are no image.
  EXPECT_NE(
      error_of(load_image_url("data:image/png;base64,aGVsbG8=", {})).find("neither PNG nor JPEG"),
      std::string::npos);
}

TEST(ImageUrl, RemoteAndLocalUrlsAreRefusedUnlessADirectoryIsAllowed) {
  EXPECT_NE(error_of(load_image_url("https://example.com/cat.png", {}))
                .find("only data: URLs are accepted"),
            std::string::npos);
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "ib_vision_test_media";
  fs::create_directories(dir / "inside");
  const Image image = test::pattern_image(5, 4, 2);
  const std::vector<uint8_t> bytes = test::encode_png(image.rgb, 5, 4, 3);
  for (const fs::path& p : {dir / "inside" / "a.png", dir / "b.png"}) {
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<long>(bytes.size()));
  }
  const std::string inside = "file://" + (dir / "inside" / "a.png").string();
  EXPECT_NE(error_of(load_image_url(inside, {})).find("--allowed-local-media-path"),
            std::string::npos);
  ImageInputPolicy policy;
  policy.allowed_local_media_path = (dir / "inside").string();
  auto ok = load_image_url(inside, policy);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->rgb, image.rgb);
  const std::string escape = "file://" + (dir / "inside" / ".." / "b.png").string();
  EXPECT_NE(error_of(load_image_url(escape, policy)).find("outside --allowed-local-media-path"),
            std::string::npos);
  policy.max_encoded_bytes = 10;
  EXPECT_NE(error_of(load_image_url(inside, policy)).find("over the cap of 10 bytes"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(ImageUrl, TheByteCapIsCheckedBeforeDecoding) {
  ImageInputPolicy policy;
  policy.max_encoded_bytes = 16;
  EXPECT_NE(error_of(load_image_url(png_url(), policy)).find("over the cap of 16 bytes"),
            std::string::npos);
}

TEST(PromptImageReader, KeepsTextAndImagesInOrder) {
  PromptImageReader reader(ImageInputPolicy{2, 1 << 20, {}, {}});
  auto text = reader.read_content("just text", "messages[0].content");
  ASSERT_TRUE(text.ok());
  ASSERT_EQ(text->size(), 1u);
  EXPECT_EQ((*text)[0].text, "just text");
  const json content =
      json::array({json{{"type", "text"}, {"text", "before"}}, image_part(png_url(1)),
                   json{{"type", "text"}, {"text", "after"}}});
  auto parts = reader.read_content(content, "messages[1].content");
  ASSERT_TRUE(parts.ok()) << parts.error().message;
  ASSERT_EQ(parts->size(), 3u);
  EXPECT_EQ((*parts)[0].kind, ContentPart::Kind::kText);
  EXPECT_EQ((*parts)[1].kind, ContentPart::Kind::kImage);
  EXPECT_EQ((*parts)[1].image.rgb, test::pattern_image(4, 3, 1).rgb);
  EXPECT_EQ((*parts)[2].text, "after");
  EXPECT_EQ(reader.images(), 1);
}

TEST(PromptImageReader, TheLimitCountsAcrossMessagesAndNamesThePart) {
  PromptImageReader reader(ImageInputPolicy{2, 1 << 20, {}, {}});
  ASSERT_TRUE(
      reader.read_content(json::array({image_part(png_url())}), "messages[0].content").ok());
  auto over = reader.read_content(json::array({json{{"type", "text"}, {"text", "x"}},
                                               image_part(png_url()), image_part(png_url())}),
                                  "messages[1].content");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().kind, ErrorKind::kUser);
  EXPECT_NE(over.error().message.find("messages[1].content[2] (image_url): the prompt holds more "
                                      "than 2 image(s)"),
            std::string::npos)
      << over.error().message;
}

TEST(PromptImageReader, BadPartsAreNamed) {
  PromptImageReader reader(ImageInputPolicy{});
  auto corrupt = reader.read_content(
      json::array({image_part("data:image/png;base64,iVBORw0KGgoAAAAA")}), "messages[0].content");
  ASSERT_FALSE(corrupt.ok());
  EXPECT_EQ(corrupt.error().message.find("messages[0].content[0] (image_url): PNG: "), 0u)
      << corrupt.error().message;
  auto audio = reader.read_content(json::array({json{{"type", "input_audio"}}}), "m");
  ASSERT_FALSE(audio.ok());
  EXPECT_NE(audio.error().message.find("m[0] (input_audio): this content part type is not "
                                       "supported"),
            std::string::npos);
  auto no_url =
      reader.read_content(json::array({json{{"type", "image_url"}, {"image_url", 3}}}), "m");
  ASSERT_FALSE(no_url.ok());
  EXPECT_NE(no_url.error().message.find("m[0] (image_url): needs"), std::string::npos);
  EXPECT_FALSE(reader.read_content(json(5), "m").ok());
  EXPECT_FALSE(reader.read_content(json::array({json{{"type", "text"}}}), "m").ok());
  EXPECT_EQ(reader.images(), 0);
}

}  // namespace
}  // namespace ib
