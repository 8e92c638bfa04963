// CLIP preprocessing: the resize bit-exact against Pillow's (goldens written by Pillow,
// testdata/make_golden.py), torchvision's fixed point within one level of the exact filter, the
// crop's rounding per backend, the pixel values of transformers' PIL path, and the config reader.
#include "vision/clip_preprocess.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "vision/detail/bicubic_resize.h"
#include "vision/vision_test_support.h"

namespace ib {
namespace {

std::filesystem::path testdata(const std::string& name) {
  const char* src = std::getenv("INFERBENCH_SOURCE_DIR");
  return std::filesystem::path(src != nullptr ? src : ".") / "src/vision/testdata" / name;
}

std::vector<uint8_t> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

Image read_png(const std::string& name) {
  auto image = decode_image(read_bytes(testdata(name)), {});
  IB_ASSERT(image.ok(), "a testdata PNG does not decode (INFERBENCH_SOURCE_DIR unset?)");
  return std::move(*image);
}

std::string read_text(const std::string& name) {
  const auto bytes = read_bytes(testdata(name));
  return {bytes.begin(), bytes.end()};
}

// The exact (real-valued) antialiased bicubic resize, independent of either fixed point.
double cubic(double x) {
  x = std::abs(x);
  if (x < 1) return 1.5 * x * x * x - 2.5 * x * x + 1;
  if (x < 2) return -0.5 * x * x * x + 2.5 * x * x - 4 * x + 2;
  return 0;
}

std::vector<double> exact_axis(const std::vector<double>& line, int64_t out_size) {
  const auto in_size = static_cast<int64_t>(line.size());
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double stretch = std::max(scale, 1.0);
  std::vector<double> out;
  for (int64_t o = 0; o < out_size; ++o) {
    const double center = (static_cast<double>(o) + 0.5) * scale;
    double sum = 0, total = 0;
    for (int64_t i = 0; i < in_size; ++i) {
      const double w = cubic((static_cast<double>(i) + 0.5 - center) / stretch);
      sum += w * line[static_cast<size_t>(i)];
      total += w;
    }
    out.push_back(sum / total);
  }
  return out;
}

TEST(BicubicResize, PillowsResizeIsReproducedBitForBit) {
  const Image input = read_png("resize_input.png");
  ASSERT_EQ(input.width_px, 37);
  for (const auto& [w, h] : {std::pair{16, 11}, std::pair{50, 31}, std::pair{37, 9}}) {
    const Image want =
        read_png("pil_resize_" + std::to_string(w) + "x" + std::to_string(h) + ".png");
    const Image got = detail::resize_bicubic(input, w, h, detail::FixedPointRule::kPil);
    ASSERT_EQ(got.width_px, w);
    ASSERT_EQ(got.height_px, h);
    int mismatches = 0;
    for (size_t i = 0; i < want.rgb.size(); ++i) mismatches += got.rgb[i] != want.rgb[i];
    EXPECT_EQ(mismatches, 0) << w << "x" << h;
  }
}

TEST(BicubicResize, TorchvisionsFixedPointIsWithinOneLevelOfTheExactFilter) {
  const Image input = read_png("resize_input.png");
  for (const auto& [w, h] : {std::pair{16, 11}, std::pair{50, 31}, std::pair{37, 9}}) {
    const Image got = detail::resize_bicubic(input, w, h, detail::FixedPointRule::kTorchvision);
    int worst = 0;
    for (int c = 0; c < 3; ++c) {
      // Rows first (clamped and rounded to 8 bits as the libraries do), then columns.
      std::vector<std::vector<double>> rows;
      for (int64_t y = 0; y < input.height_px; ++y) {
        std::vector<double> line;
        for (int64_t x = 0; x < input.width_px; ++x) line.push_back(input.at(y, x, c));
        auto r = w == input.width_px ? line : exact_axis(line, w);
        for (double& v : r) v = std::clamp(std::floor(v + 0.5), 0.0, 255.0);
        rows.push_back(r);
      }
      for (int64_t x = 0; x < w; ++x) {
        std::vector<double> column;
        for (const auto& r : rows) column.push_back(r[static_cast<size_t>(x)]);
        const auto col = exact_axis(column, h);
        for (int64_t y = 0; y < h; ++y) {
          const double want = std::clamp(col[static_cast<size_t>(y)], 0.0, 255.0);
          worst =
              std::max(worst, static_cast<int>(std::ceil(std::abs(got.at(y, x, c) - want) - 0.5)));
        }
      }
    }
    EXPECT_LE(worst, 1) << w << "x" << h;
  }
}

TEST(BicubicResize, AConstantImageStaysConstant) {
  Image flat{13, 7, std::vector<uint8_t>(13 * 7 * 3, 201)};
  for (auto rule : {detail::FixedPointRule::kPil, detail::FixedPointRule::kTorchvision}) {
    const Image got = detail::resize_bicubic(flat, 30, 4, rule);
    for (uint8_t v : got.rgb) ASSERT_EQ(v, 201);
  }
}

TEST(ClipPreprocess, TransformersPilPathsPixelValues) {
  auto config = parse_clip_preprocess_config(read_text("small_preprocessor_config.json"), "small");
  ASSERT_TRUE(config.ok()) << config.error().message;
  const auto got = preprocess_clip(read_png("resize_input.png"), *config, ImageBackend::kPil);
  const auto bytes = read_bytes(testdata("clip_pil_expected.f32"));
  ASSERT_EQ(got.size() * 4, bytes.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    float want = 0;
    std::memcpy(&want, bytes.data() + i * 4, 4);
    worst = std::max(worst, static_cast<double>(std::abs(got[i] - want)));
  }
  EXPECT_LE(worst, 1e-6);
}

TEST(ClipPreprocess, CropMarginsFloorInBothBackends) {
  // 21 x 4 columns numbered by x; crop 18 wide without a resize: margin 3 floors to 1 in both
  // (transformers 5.17's torchvision path does not round 1.5 to even, as the H200 showed).
  Image image{21, 4, {}};
  for (int64_t y = 0; y < 4; ++y) {
    for (int64_t x = 0; x < 21; ++x) {
      for (int c = 0; c < 3; ++c) image.rgb.push_back(static_cast<uint8_t>(x));
    }
  }
  ClipPreprocessConfig config;
  config.do_resize = false;
  config.crop_height_px = 4;
  config.crop_width_px = 18;
  config.do_rescale = false;
  config.do_normalize = false;
  EXPECT_EQ(preprocess_clip(image, config, ImageBackend::kPil)[0], 1.0f);
  EXPECT_EQ(preprocess_clip(image, config, ImageBackend::kTorchvision)[0], 1.0f);
  config.crop_width_px = 16;  // margin 5: 2
  EXPECT_EQ(preprocess_clip(image, config, ImageBackend::kPil)[0], 2.0f);
  EXPECT_EQ(preprocess_clip(image, config, ImageBackend::kTorchvision)[0], 2.0f);
}

TEST(ClipPreprocess, NormalisesAConstantImage) {
  auto config = parse_clip_preprocess_config(read_text("llava_preprocessor_config.json"), "llava");
  ASSERT_TRUE(config.ok()) << config.error().message;
  Image flat{500, 400, std::vector<uint8_t>(500 * 400 * 3, 128)};
  for (auto backend : {ImageBackend::kPil, ImageBackend::kTorchvision}) {
    const auto got = preprocess_clip(flat, *config, backend);
    ASSERT_EQ(got.size(), 3u * 336 * 336);
    for (int c = 0; c < 3; ++c) {
      const double want = (128.0 / 255.0 - config->image_mean[static_cast<size_t>(c)]) /
                          config->image_std[static_cast<size_t>(c)];
      EXPECT_NEAR(got[static_cast<size_t>(c) * 336 * 336 + 1234], want, 1e-6);
    }
  }
}

TEST(ClipPreprocess, ResizedSizeFollowsTransformers) {
  EXPECT_EQ(clip_resized_size(640, 480, 336), (std::array<int64_t, 2>{448, 336}));
  EXPECT_EQ(clip_resized_size(480, 640, 336), (std::array<int64_t, 2>{336, 448}));
  EXPECT_EQ(clip_resized_size(1000, 337, 336), (std::array<int64_t, 2>{997, 336}));
  EXPECT_EQ(clip_resized_size(336, 336, 336), (std::array<int64_t, 2>{336, 336}));
}

TEST(ClipPreprocessConfig, ReadsLlavasFileAndOlderSpellings) {
  auto llava = parse_clip_preprocess_config(read_text("llava_preprocessor_config.json"), "llava");
  ASSERT_TRUE(llava.ok()) << llava.error().message;
  EXPECT_EQ(llava->shortest_edge_px, 336);
  EXPECT_EQ(llava->crop_width_px, 336);
  EXPECT_DOUBLE_EQ(llava->image_std[2], 0.27577711);
  EXPECT_DOUBLE_EQ(llava->rescale_factor, 0.00392156862745098);
  auto old = parse_clip_preprocess_config(R"({"size": 224, "crop_size": 224, "resample": 3})", "o");
  ASSERT_TRUE(old.ok()) << old.error().message;
  EXPECT_EQ(old->shortest_edge_px, 224);
  EXPECT_EQ(old->crop_height_px, 224);
  const std::pair<const char*, const char*> bad[] = {
      {R"({"resample": 2})", "resample 2 is not supported"},
      {R"({"size": {"height": 336, "width": 336}})", "shortest_edge"},
      {R"({"size": {"shortest_edge": 0}})", "1..8192"},
      {R"({"crop_size": {"height": 400, "width": 336}})", "crop is larger"},
      {R"({"image_std": [1, 0, 1]})", "must be positive"},
      {R"({"image_mean": [1, 2]})", "three numbers"},
      {R"({"do_resize": "yes"})", "true or false"},
      {"[]", "not a JSON object"}};
  for (const auto& [json, want] : bad) {
    auto r = parse_clip_preprocess_config(json, "cfg.json");
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_NE(r.error().message.find(want), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find("cfg.json"), 0u);
  }
}

}  // namespace
}  // namespace ib
