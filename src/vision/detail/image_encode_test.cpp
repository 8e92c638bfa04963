// The client-side encoders: PNG decoded back by decode_image to the same pixels, base64 as RFC
// 4648's test vectors and decoded back by decode_base64.
#include "vision/detail/image_encode.h"

#include <gtest/gtest.h>

#include "core/rng.h"
#include "vision/detail/base64.h"

namespace ib {
namespace {

Image random_image(int64_t width_px, int64_t height_px, uint64_t seed) {
  Image image{width_px, height_px, {}};
  image.rgb.resize(static_cast<size_t>(width_px * height_px * 3));  // (H, W, 3)
  Rng rng(seed);
  for (uint8_t& v : image.rgb) v = static_cast<uint8_t>(rng.next_u64() >> 56);
  return image;
}

TEST(EncodePng, DecodesToTheSamePixels) {
  // Odd widths (rows not a multiple of 4 bytes), one pixel, a wide and a tall one.
  for (const auto& [w, h] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {3, 2}, {37, 19}, {640, 3}, {2, 500}, {336, 336}}) {
    const Image want = random_image(w, h, static_cast<uint64_t>(w * 1000 + h));
    auto png = detail::encode_png(want);
    ASSERT_TRUE(png.ok()) << png.error().message;
    EXPECT_EQ(sniff_image_format(*png), ImageFormat::kPng);
    auto got = decode_image(*png, {});
    ASSERT_TRUE(got.ok()) << got.error().message;
    EXPECT_EQ(got->width_px, w);
    EXPECT_EQ(got->height_px, h);
    EXPECT_EQ(got->rgb, want.rgb) << w << "x" << h;
  }
}

TEST(EncodePng, SmoothImagesCompress) {
  Image flat{64, 64, std::vector<uint8_t>(64 * 64 * 3, 200)};
  auto png = detail::encode_png(flat);
  ASSERT_TRUE(png.ok()) << png.error().message;
  EXPECT_LT(png->size(), flat.rgb.size() / 10);
  auto got = decode_image(*png, {});
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(got->rgb, flat.rgb);
}

TEST(EncodeBase64, Rfc4648Vectors) {
  auto b64 = [](std::string_view s) {
    return detail::encode_base64(std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  };
  EXPECT_EQ(b64(""), "");
  EXPECT_EQ(b64("f"), "Zg==");
  EXPECT_EQ(b64("fo"), "Zm8=");
  EXPECT_EQ(b64("foo"), "Zm9v");
  EXPECT_EQ(b64("foob"), "Zm9vYg==");
  EXPECT_EQ(b64("fooba"), "Zm9vYmE=");
  EXPECT_EQ(b64("foobar"), "Zm9vYmFy");
}

TEST(EncodeBase64, DecodesToTheSameBytes) {
  Rng rng(7);
  for (size_t n = 0; n < 70; ++n) {
    std::vector<uint8_t> bytes(n);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng.next_u64() >> 56);
    const std::string text = detail::encode_base64(bytes);
    EXPECT_EQ(text.size(), (n + 2) / 3 * 4);
    auto back = detail::decode_base64(text);
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(*back, bytes) << n;
  }
}

}  // namespace
}  // namespace ib
