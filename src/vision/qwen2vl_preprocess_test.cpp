// Qwen2-VL's preprocessing and prompt positions against values computed independently from
// transformers' definitions: smart_resize's sizes (goldens from the Python below), the patch
// rows against a literal reshape-and-permute of the normalised frames, get_rope_index against
// hand-worked positions and its chunk-list form, and the configs' errors.
#include <gtest/gtest.h>

#include <array>
#include <span>
#include <string>
#include <vector>

#include "vision/detail/bicubic_resize.h"
#include "vision/image_tokens.h"
#include "vision/qwen2vl_positions.h"
#include "vision/qwen2vl_preprocess.h"
#include "vision/qwen2vl_test_support.h"
#include "vision/vision_test_support.h"

namespace ib {
namespace {

using qwen2vl_test::kImagePad;
using qwen2vl_test::kVisionEnd;
using qwen2vl_test::kVisionStart;

// Goldens from transformers' smart_resize transcribed in Python:
//   def sr(h, w, f, mn, mx):
//       hb = round(h / f) * f; wb = round(w / f) * f
//       if hb * wb > mx:
//           b = math.sqrt(h * w / mx)
//           hb = max(f, math.floor(h / b / f) * f); wb = max(f, math.floor(w / b / f) * f)
//       elif hb * wb < mn:
//           b = math.sqrt(mn / (h * w))
//           hb = math.ceil(h * b / f) * f; wb = math.ceil(w * b / f) * f
//       return hb, wb
TEST(Qwen2VlSmartResize, MatchesThePublishedDefinition) {
  struct Case {
    int64_t h, w, f, min_pixels, max_pixels, want_h, want_w;
  };
  const Case cases[] = {
      {23, 37, 8, 64, 4096, 24, 40},
      {28, 20, 8, 64, 4096, 32, 16},  // 3.5 and 2.5 round half to even
      {1000, 1000, 28, 3136, 1003520, 980, 980},
      {30, 30, 28, 3136, 1003520, 56, 56},  // under min_pixels: scaled up
      {1344, 1344, 28, 3136, 1003520, 980, 980},
      {1344, 1344, 28, 3136, 12845056, 1344, 1344},
      {480, 640, 28, 3136, 1003520, 476, 644},
      {100, 3000, 28, 3136, 1003520, 112, 2996},
      {12, 60, 8, 64, 4096, 16, 64},
  };
  for (const Case& c : cases) {
    auto got = qwen2vl_smart_resize(c.h, c.w, c.f, c.min_pixels, c.max_pixels);
    ASSERT_TRUE(got.ok()) << got.error().message;
    EXPECT_EQ((*got)[0], c.want_h) << c.h << " x " << c.w;
    EXPECT_EQ((*got)[1], c.want_w) << c.h << " x " << c.w;
  }
  auto small = qwen2vl_smart_resize(20, 300, 28, 3136, 1003520);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.error().message.find("at least 28 px"), std::string::npos);
  auto thin = qwen2vl_smart_resize(30, 6100, 28, 3136, 1 << 30);
  ASSERT_FALSE(thin.ok());
  EXPECT_NE(thin.error().message.find("over 200"), std::string::npos);
}

// The processor's flattening, literally: the frame repeated over T, reshaped to (grid_t, T, C,
// gh / m, m, p, gw / m, m, p), permuted (0, 3, 6, 4, 7, 2, 1, 5, 8), flattened.
std::vector<double> reference_patches(const std::vector<float>& planes, int64_t h, int64_t w,
                                      const Qwen2VlPreprocessConfig& c) {
  const int64_t p = c.patch_size_px, m = c.merge_size, t = c.temporal_patch_size;
  std::vector<double> frames;
  for (int64_t f = 0; f < t; ++f) frames.insert(frames.end(), planes.begin(), planes.end());
  return qwen2vl_test::permute(frames, {1, t, 3, h / p / m, m, p, w / p / m, m, p},
                               {0, 3, 6, 4, 7, 2, 1, 5, 8});
}

Qwen2VlPreprocessConfig tiny_preprocess() {
  auto c = parse_qwen2vl_preprocess_config(qwen2vl_test::kTinyPreprocessor, "tiny");
  IB_ASSERT(c.ok(), "the tiny preprocessor does not parse");
  return *c;
}

TEST(Qwen2VlPreprocess, PatchRowsAreTheProcessorsPermutation) {
  const Qwen2VlPreprocessConfig c = tiny_preprocess();
  for (const auto backend : {ImageBackend::kTorchvision, ImageBackend::kPil}) {
    const Image image = test::pattern_image(37, 23, 5, /*noisy=*/true);
    auto got = preprocess_qwen2vl(image, c, backend);
    ASSERT_TRUE(got.ok()) << got.error().message;
    // smart_resize(23, 37) = (24, 40): a grid of 6 x 10 patches of 4 px, 15 tokens.
    EXPECT_EQ(got->grid_thw, (std::array<int64_t, 3>{1, 6, 10}));
    EXPECT_EQ(got->tokens(2), 15);
    const auto rule = backend == ImageBackend::kPil ? detail::FixedPointRule::kPil
                                                    : detail::FixedPointRule::kTorchvision;
    const Image resized = detail::resize_bicubic(image, 40, 24, rule);
    const std::vector<float> planes = preprocess_clip(resized, c.normalize, backend);
    const std::vector<double> want = reference_patches(planes, 24, 40, c);
    ASSERT_EQ(got->values.size(), want.size());
    EXPECT_EQ(got->values.size(), 60u * 96u);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(static_cast<double>(got->values[i]), want[i]) << "value " << i;
    }
  }
}

TEST(Qwen2VlPreprocess, NormalisesWithTheConfigsMeanAndStd) {
  Qwen2VlPreprocessConfig c = tiny_preprocess();
  c.do_resize = false;
  Image image{8, 8, std::vector<uint8_t>(8 * 8 * 3, 0)};
  image.rgb[0] = 255;  // pixel (0, 0) red 255, the rest 0
  auto got = preprocess_qwen2vl(image, c, ImageBackend::kPil);
  ASSERT_TRUE(got.ok()) << got.error().message;
  // Row 0 is patch (0, 0); column (c 0, frame 0 and 1, y 0, x 0) is pixel (0, 0)'s red.
  const double red = (1.0 - 0.48145466) / 0.26862954, zero_green = -0.4578275 / 0.26130258;
  EXPECT_NEAR(got->values[0], red, 1e-6);
  EXPECT_NEAR(got->values[16], red, 1e-6);         // the second frame repeats the image
  EXPECT_NEAR(got->values[32], zero_green, 1e-6);  // channel 1 starts at 2 x 4 x 4
  image.width_px = 7;
  image.rgb.resize(7 * 8 * 3);
  auto odd = preprocess_qwen2vl(image, c, ImageBackend::kPil);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.error().message.find("not multiples of 8"), std::string::npos);
}

TEST(Qwen2VlPreprocess, ReadsTheProcessorConfig) {
  auto c = parse_qwen2vl_preprocess_config(
      R"({"size": {"shortest_edge": 3136, "longest_edge": 12845056}, "max_pixels": 1003520})",
      "p.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->min_pixels, 3136);
  EXPECT_EQ(c->max_pixels, 1003520);  // max_pixels overrides size.longest_edge
  EXPECT_EQ(c->factor_px(), 28);
  const std::pair<const char*, const char*> bad[] = {
      {R"({"resample": 2})", "bicubic"},
      {R"({"min_pixels": 5000, "max_pixels": 4000})", "exceeds max_pixels"},
      {R"({"image_std": [1, 0, 1]})", "positive"},
      {"[]", "not a JSON object"}};
  for (const auto& [json, words] : bad) {
    auto r = parse_qwen2vl_preprocess_config(json, "p.json");
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_EQ(r.error().kind, ErrorKind::kUser);
    EXPECT_NE(r.error().message.find(words), std::string::npos) << r.error().message;
  }
  const Qwen2VlConfig tiny = qwen2vl_test::tiny_config();
  auto mismatch = check_qwen2vl_preprocess(*c, tiny.vision, "p.json");  // patch 14 vs 4
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.error().message.find("not this checkpoint's"), std::string::npos);
  EXPECT_TRUE(check_qwen2vl_preprocess(tiny_preprocess(), tiny.vision, "p.json").ok());
}

TEST(Qwen2VlConfig, ReadsTheVisionHalfAndRefusesWhatItCannotRun) {
  const Qwen2VlConfig c = qwen2vl_test::tiny_config();
  EXPECT_EQ(c.vision.depth, 2);
  EXPECT_EQ(c.vision.embed_dim, 32);
  EXPECT_EQ(c.vision.mlp_hidden, 64);
  EXPECT_EQ(c.vision.patch_values(), 96);
  EXPECT_EQ(c.text_hidden_size, 64);
  EXPECT_EQ(c.image_token_id, 100);
  EXPECT_EQ(c.vision_start_token_id, 101);
  // The published Qwen2-VL-2B file: text fields at the top, in_chans, the defaults elsewhere.
  auto published = parse_qwen2vl_config(
      R"({"architectures": ["Qwen2VLForConditionalGeneration"], "hidden_size": 1536,
          "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16,
                            "in_chans": 3, "hidden_size": 1536, "patch_size": 14,
                            "spatial_merge_size": 2, "spatial_patch_size": 14,
                            "temporal_patch_size": 2}})",
      "2b.json");
  ASSERT_TRUE(published.ok()) << published.error().message;
  EXPECT_EQ(published->vision.mlp_hidden, 5120);
  EXPECT_EQ(published->image_token_id, 151655);
  const std::pair<const char*, const char*> bad[] = {
      {R"({"hidden_size": 64})", "no \"vision_config\""},
      {R"({"hidden_size": 64, "vision_config": {"hidden_size": 64, "hidden_act": "gelu"}})",
       "quick_gelu"},
      {R"({"hidden_size": 64, "vision_config": {"hidden_size": 64, "embed_dim": 24,
                                                "num_heads": 4}})",
       "multiple of 4"},
      {R"({"hidden_size": 64, "vision_config": {"hidden_size": 32}})", "not the language model"},
      {R"({"hidden_size": 64, "vision_config": {"hidden_size": 64, "in_channels": 4}})",
       "in_channels"}};
  for (const auto& [json, words] : bad) {
    auto r = parse_qwen2vl_config(json, "c.json");
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_EQ(r.error().kind, ErrorKind::kUser);
    EXPECT_NE(r.error().message.find(words), std::string::npos) << r.error().message;
  }
}

// get_rope_index's docstring rule, worked by hand: text (i, i, i); an image's merged grid
// (t, h, w) offset by where it starts; text after it from the maximum + 1.
TEST(Qwen2VlPositions, FollowGetRopeIndex) {
  const Qwen2VlConfig c = qwen2vl_test::tiny_config();
  // [T T VS] + 6 image tokens (grid 1 x 4 x 6 -> merged 1 x 2 x 3) + [VE T T]
  std::vector<int32_t> ids = {5, 6, kVisionStart};
  ids.insert(ids.end(), 6, kImagePad);
  ids.insert(ids.end(), {kVisionEnd, 7, 8});
  const std::array<int64_t, 3> grid = {1, 4, 6};
  auto got = qwen2vl_mrope_positions(ids, c, std::span(&grid, 1));
  ASSERT_TRUE(got.ok()) << got.error().message;
  const std::vector<int32_t> want = {0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7, 8,   // temporal
                                     0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7, 8,   // height
                                     0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7, 8};  // width
  EXPECT_EQ(*got, want);

  // Two images of other shapes, text between and none before: the chunk-list form agrees.
  std::vector<int32_t> two = {kVisionStart};
  two.insert(two.end(), 4, kImagePad);  // grid 1 x 2 x 8 -> 1 x 1 x 4
  two.insert(two.end(), {kVisionEnd, 9, 9, 9, kVisionStart});
  two.insert(two.end(), 6, kImagePad);  // grid 1 x 6 x 4 -> 1 x 3 x 2
  two.insert(two.end(), {kVisionEnd, 4});
  const std::vector<std::array<int64_t, 3>> grids = {{1, 2, 8}, {1, 6, 4}};
  auto both = qwen2vl_mrope_positions(two, c, grids);
  ASSERT_TRUE(both.ok()) << both.error().message;
  EXPECT_EQ(*both, qwen2vl_test::reference_rope_index(two, c, grids));
  // By hand: VS 0; image (1, 1..1, 1..4) from 1, max 4; VE 9 9 9 VS 5..9; image from 10
  // (10, 10..12, 10..11), max 12; VE 4: 13, 14.
  EXPECT_EQ((*both)[two.size() - 1], 14);
  EXPECT_EQ((*both)[two.size() + 15], 12);  // height of the second image's last token

  // Text only: (i, i, i).
  auto text = qwen2vl_mrope_positions(std::vector<int32_t>{4, 5, 6}, c, {});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 1, 2}));

  auto missing = qwen2vl_mrope_positions(ids, c, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("1 image(s)"), std::string::npos);
  std::vector<int32_t> video = {kVisionStart, qwen2vl_test::kVideoPad, kVisionEnd};
  auto refused = qwen2vl_mrope_positions(video, c, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("video"), std::string::npos);
}

TEST(Qwen2VlPositions, PlaceholdersExpandToEachImagesTokens) {
  const std::vector<int32_t> ids = {1, kVisionStart, kImagePad, kVisionEnd,
                                    2, kVisionStart, kImagePad, kVisionEnd};
  const std::vector<int64_t> counts = {4, 2};
  auto got = expand_image_tokens(ids, kImagePad, counts);
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(got->token_ids.size(), ids.size() + 4);
  EXPECT_EQ(got->image_start, (std::vector<int64_t>{2, 9}));
  EXPECT_EQ(got->token_ids[5], kImagePad);
  EXPECT_EQ(got->token_ids[6], kVisionEnd);
}

}  // namespace
}  // namespace ib
