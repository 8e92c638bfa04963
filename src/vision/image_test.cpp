// PNG and JPEG decoding: every PNG color type as PIL's convert("RGB") reads it, JPEG within its
// loss, and corrupt, truncated, oversized or unsupported bytes refused with a message.
#include <gtest/gtest.h>

#include <algorithm>

#include <cstdlib>

#include "vision/image.h"
#include "vision/vision_test_support.h"

namespace ib {
namespace {

using test::encode_jpeg;
using test::encode_png;
using test::pattern_image;

TEST(ImageDecode, PngRgbIsExact) {
  const Image want = pattern_image(7, 5, 3);
  auto got = decode_image(encode_png(want.rgb, 7, 5, 3), {});
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(got->width_px, 7);
  EXPECT_EQ(got->height_px, 5);
  EXPECT_EQ(got->rgb, want.rgb);
}

TEST(ImageDecode, PngGrayIsReplicatedAndAlphaDropped) {
  const std::vector<uint8_t> gray = {0, 17, 128, 255, 3, 99};
  auto g = decode_image(encode_png(gray, 3, 2, 1), {});
  ASSERT_TRUE(g.ok()) << g.error().message;
  for (size_t i = 0; i < gray.size(); ++i) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(g->rgb[i * 3 + static_cast<size_t>(c)], gray[i]);
  }
  const std::vector<uint8_t> rgba = {10, 20, 30, 0, 40, 50, 60, 255};  // alpha 0 and 255
  auto a = decode_image(encode_png(rgba, 2, 1, 4), {});
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->rgb, (std::vector<uint8_t>{10, 20, 30, 40, 50, 60}));  // not composited
  const std::vector<uint8_t> gray_alpha = {77, 0, 200, 128};
  auto ga = decode_image(encode_png(gray_alpha, 2, 1, 2), {});
  ASSERT_TRUE(ga.ok()) << ga.error().message;
  EXPECT_EQ(ga->rgb, (std::vector<uint8_t>{77, 77, 77, 200, 200, 200}));
}

TEST(ImageDecode, Png16BitKeepsTheHighByte) {
  const std::vector<uint8_t> rgb = {1, 2, 250, 128, 0, 255};  // low bytes are 255 - v
  auto got = decode_image(encode_png(rgb, 2, 1, 3, 16), {});
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(got->rgb, rgb);
}

TEST(ImageDecode, PngPaletteAndOneBitGrayExpand) {
  const std::vector<uint8_t> palette = {255, 0, 0, 0, 255, 0, 9, 8, 7};
  auto p = decode_image(test::encode_png_palette({2, 0, 1}, palette, 3, 1), {});
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->rgb, (std::vector<uint8_t>{9, 8, 7, 255, 0, 0, 0, 255, 0}));
  auto b = decode_image(test::encode_png_gray1({1, 0, 0, 1, 1, 0, 1, 0, 1}, 9, 1), {});
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->width_px, 9);
  EXPECT_EQ(b->at(0, 0, 1), 255);
  EXPECT_EQ(b->at(0, 1, 1), 0);
  EXPECT_EQ(b->at(0, 8, 2), 255);
}

TEST(ImageDecode, PngWithABadCrcOrTruncatedIsRefused) {
  const Image image = pattern_image(16, 16, 1);
  std::vector<uint8_t> bytes = encode_png(image.rgb, 16, 16, 3);
  std::vector<uint8_t> flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x5a;  // inside IDAT: the CRC no longer matches
  auto bad = decode_image(flipped, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::kUser);
  EXPECT_NE(bad.error().message.find("PNG: "), std::string::npos) << bad.error().message;
  for (size_t keep : {size_t{8}, size_t{30}, bytes.size() / 2, bytes.size() - 13}) {
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(keep));
    auto truncated = decode_image(cut, {});
    ASSERT_FALSE(truncated.ok()) << "kept " << keep;
    EXPECT_NE(truncated.error().message.find("PNG: "), std::string::npos);
  }
}

TEST(ImageDecode, JpegIsCloseAndGrayIsReplicated) {
  const Image smooth = pattern_image(24, 16, 40);  // a smooth ramp: JPEG keeps it within a few
  Image ramp = smooth;
  for (int64_t y = 0; y < 16; ++y) {
    for (int64_t x = 0; x < 24; ++x) {
      for (int c = 0; c < 3; ++c) {
        ramp.rgb[static_cast<size_t>((y * 24 + x) * 3 + c)] =
            static_cast<uint8_t>(40 + 4 * x + 3 * y + 20 * c);
      }
    }
  }
  auto got = decode_image(encode_jpeg(ramp.rgb, 24, 16, 3, 100), {});
  ASSERT_TRUE(got.ok()) << got.error().message;
  ASSERT_EQ(got->rgb.size(), ramp.rgb.size());
  int max_diff = 0;
  for (size_t i = 0; i < ramp.rgb.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(int{got->rgb[i]} - int{ramp.rgb[i]}));
  }
  EXPECT_LE(max_diff, 6);
  const std::vector<uint8_t> gray(64, 90);
  auto g = decode_image(encode_jpeg(gray, 8, 8, 1, 90), {});
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->at(3, 4, 0), 90);
  EXPECT_EQ(g->at(3, 4, 1), 90);
  EXPECT_EQ(g->at(3, 4, 2), 90);
}

TEST(ImageDecode, TruncatedJpegIsRefused) {
  const Image image = pattern_image(32, 32, 5, /*noisy=*/true);
  const std::vector<uint8_t> bytes = encode_jpeg(image.rgb, 32, 32, 3, 90);
  for (size_t keep : {size_t{3}, size_t{40}, bytes.size() / 2}) {
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(keep));
    auto got = decode_image(cut, {});
    ASSERT_FALSE(got.ok()) << "kept " << keep;
    EXPECT_NE(got.error().message.find("JPEG: "), std::string::npos) << got.error().message;
  }
}

TEST(ImageDecode, OverThePixelCapIsRefusedFromTheHeader) {
  const Image image = pattern_image(40, 30, 0);
  for (const auto& bytes :
       {encode_png(image.rgb, 40, 30, 3), encode_jpeg(image.rgb, 40, 30, 3, 80)}) {
    auto got = decode_image(bytes, ImageLimits{1199});
    ASSERT_FALSE(got.ok());
    EXPECT_NE(got.error().message.find("40x30 pixels, over the cap of 1199"), std::string::npos)
        << got.error().message;
    EXPECT_TRUE(decode_image(bytes, ImageLimits{1200}).ok());
  }
}

TEST(ImageDecode, OtherFormatsAreRefusedByName) {
  const std::vector<uint8_t> gif = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0};
  auto g = decode_image(gif, {});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find("image/gif is not supported"), std::string::npos);
  const std::vector<uint8_t> webp = {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'};
  EXPECT_EQ(sniff_image_format(webp), ImageFormat::kWebp);
  auto junk = decode_image(std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o'}, {});
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.error().message.find("neither PNG nor JPEG"), std::string::npos);
  auto empty = decode_image(std::vector<uint8_t>{}, {});
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message.find("empty"), std::string::npos);
}

// random-mm's draw: its size, the same pixels for the same seed (every target draws it), other
// pixels for another seed, and bytes spread over the whole range.
TEST(RandomImage, TheSeedFixesThePixels) {
  const Image a = random_rgb_image(5, 3, 7), b = random_rgb_image(5, 3, 7);
  EXPECT_EQ(a.width_px, 5);
  EXPECT_EQ(a.height_px, 3);
  ASSERT_EQ(a.rgb.size(), 45u);
  EXPECT_EQ(a.rgb, b.rgb);
  EXPECT_NE(a.rgb, random_rgb_image(5, 3, 8).rgb);
  const Image big = random_rgb_image(64, 64, 1);
  EXPECT_LT(*std::min_element(big.rgb.begin(), big.rgb.end()), 16);
  EXPECT_GT(*std::max_element(big.rgb.begin(), big.rgb.end()), 239);
}

}  // namespace
}  // namespace ib
