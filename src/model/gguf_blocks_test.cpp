// ggml block formats: hand-built blocks whose values are worked out here from ggml's published
// definitions, and quantize -> dequantize within each format's bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/dtype.h"
#include "model/gguf.h"

namespace ib {
namespace {

void put_f16(std::string& block, size_t at, uint16_t bits) {
  std::memcpy(&block[at], &bits, 2);
}

float f16_at(const std::string& block, size_t at) {
  uint16_t bits;
  std::memcpy(&bits, &block[at], 2);
  return f16_bits_to_f32(bits);
}

std::vector<float> dequantized(GgmlType type, const std::string& bytes, size_t n) {
  std::vector<float> out(n);
  const Status s = dequantize_ggml(type, bytes, out);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return out;
}

TEST(GgmlBlocks, Q8_0ByHand) {
  std::string block(34, '\0');
  put_f16(block, 0, 0x3800);  // d = 0.5
  block[2] = 1;
  block[3] = static_cast<char>(-1);
  block[4] = 127;
  block[5] = static_cast<char>(-128);
  std::vector<float> expected(32, 0.0f);
  expected[0] = 0.5f;
  expected[1] = -0.5f;
  expected[2] = 63.5f;
  expected[3] = -64.0f;
  EXPECT_EQ(dequantized(GgmlType::kQ8_0, block, 32), expected);
}

TEST(GgmlBlocks, Q4_0ByHand) {
  std::string block(18, '\x88');  // every nibble 8: zero
  put_f16(block, 0, 0x4000);      // d = 2
  block[2] = '\x1F';              // element 0: low nibble 15 -> 14; element 16: high 1 -> -14
  block[2 + 15] = '\x80';         // element 15: low 0 -> -16; element 31: high 8 -> 0
  std::vector<float> expected(32, 0.0f);
  expected[0] = (15 - 8) * 2.0f;
  expected[16] = (1 - 8) * 2.0f;
  expected[15] = (0 - 8) * 2.0f;
  EXPECT_EQ(dequantized(GgmlType::kQ4_0, block, 32), expected);
}

// Q4_K / Q5_K scales for the hand-built blocks: sub-block 0 scale 2, min 4; sub-block 5 scale 37
// (0b10'0101: low nibble in byte 9, top bits in byte 1), min 19 (0b01'0011: high nibble of byte 9,
// top bits in byte 5). Every other sub-block has scale and min 0.
std::string k_header(size_t block_bytes) {
  std::string block(block_bytes, '\0');
  put_f16(block, 0, 0x3C00);  // d = 1
  put_f16(block, 2, 0x3800);  // dmin = 0.5
  block[4 + 0] = 2;
  block[4 + 4] = 4;
  block[4 + 9] = 0x35;
  block[4 + 1] = static_cast<char>(2 << 6);
  block[4 + 5] = static_cast<char>(1 << 6);
  return block;
}

// Sub-block 0 with code 0 is 1 * 2 * 0 - 0.5 * 4 = -2; sub-block 5 with code 0 is -0.5 * 19.
std::vector<float> k_defaults() {
  std::vector<float> v(256, 0.0f);
  for (int l = 0; l < 32; ++l) v[l] = -2.0f;
  for (int l = 160; l < 192; ++l) v[l] = -9.5f;
  return v;
}

TEST(GgmlBlocks, Q4_KByHand) {
  std::string block = k_header(144);
  block[16 + 0] = static_cast<char>(0xA7);  // element 0: low nibble 7; element 32 (scale 0): 10
  block[16 + 64 + 3] = static_cast<char>(0xF0);  // element 163 (sub-block 5): high nibble 15
  std::vector<float> expected = k_defaults();
  expected[0] = 1.0f * 2 * 7 - 0.5f * 4;       // 12
  expected[163] = 1.0f * 37 * 15 - 0.5f * 19;  // 545.5
  EXPECT_EQ(dequantized(GgmlType::kQ4_K, block, 256), expected);
}

TEST(GgmlBlocks, Q5_KByHand) {
  std::string block = k_header(176);
  block[48 + 0] = 0x07;                          // element 0: low bits 7
  block[16 + 0] = 0x01;                          // qh[0] bit 0: element 0's fifth bit
  block[48 + 64 + 3] = static_cast<char>(0xF0);  // element 163: low bits 15
  block[16 + 3] = 1 << 5;                        // qh[3] bit 5: element 163's fifth bit
  std::vector<float> expected = k_defaults();
  expected[0] = 1.0f * 2 * (7 + 16) - 0.5f * 4;       // 44
  expected[163] = 1.0f * 37 * (15 + 16) - 0.5f * 19;  // 1137.5
  EXPECT_EQ(dequantized(GgmlType::kQ5_K, block, 256), expected);
}

TEST(GgmlBlocks, Q6_KByHand) {
  std::string block(210, '\0');
  put_f16(block, 208, 0x3400);             // d = 0.25
  block[192 + 0] = 3;                      // sub-block 0 (elements 0..15)
  block[192 + 7] = static_cast<char>(-2);  // sub-block 7 (elements 112..127)
  block[0] = 0x05;                         // element 0: low bits 5 (ql[0] low nibble)
  block[128 + 0] = 0x02;                   // element 0: high bits 2 (qh[0] bits 0-1)
  block[52] = 0x30;  // element 116 = 96 + 20: ql[20 + 32] high nibble 3, qh[20] bits 6-7 zero
  std::vector<float> expected(256, 0.0f);
  for (int l = 0; l < 16; ++l) expected[l] = 0.25f * 3 * (0 - 32);
  for (int l = 112; l < 128; ++l) expected[l] = 0.25f * -2 * (0 - 32);
  expected[0] = 0.25f * 3 * ((5 | (2 << 4)) - 32);  // 3.75
  expected[116] = 0.25f * -2 * (3 - 32);            // 14.5
  EXPECT_EQ(dequantized(GgmlType::kQ6_K, block, 256), expected);
}

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  x[5] = 0.0f;
  x[70] *= 6.0f;  // an outlier in one block
  return x;
}

// The quantization step of the block (or sub-block) holding element e, read from the bytes as
// the format defines it: Q8_0 / Q4_0 d; Q4_K / Q5_K d * sc; Q6_K d * scale.
float step_of(GgmlType type, const std::string& bytes, size_t e) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  const std::string block = bytes.substr(
      e / static_cast<size_t>(info.block_elems) * static_cast<size_t>(info.block_bytes),
      static_cast<size_t>(info.block_bytes));
  const size_t i = e % static_cast<size_t>(info.block_elems);
  if (type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0) return f16_at(block, 0);
  if (type == GgmlType::kQ6_K) return f16_at(block, 208) * static_cast<int8_t>(block[192 + i / 16]);
  const auto* q = reinterpret_cast<const uint8_t*>(block.data() + 4);
  const size_t j = i / 32;
  const int sc = j < 4 ? q[j] & 63 : (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
  return f16_at(block, 0) * static_cast<float>(sc);
}

struct Bound {
  GgmlType type;
  double max_relative_rms;  // RMS error over RMS value on unit Gaussians, from the step sizes
};

TEST(GgmlBlocks, QuantizeDequantizeStaysWithinHalfAStep) {
  // Each element within step / 2 of its value (the quantizer rounds scales up, so nothing clips),
  // and the whole tensor's RMS error at the level the format's bits give for unit Gaussians:
  // Q8_0 ~ 2.5 / 127 / sqrt(12), Q4_0 ~ 2.5 / 7 / sqrt(12), K-quants a little more for the
  // 6-bit scales.
  const Bound bounds[] = {{GgmlType::kQ8_0, 0.01},
                          {GgmlType::kQ4_0, 0.15},
                          {GgmlType::kQ4_K, 0.12},
                          {GgmlType::kQ5_K, 0.06},
                          {GgmlType::kQ6_K, 0.03}};
  const std::vector<float> x = gaussian(1024, 7);
  for (const Bound& b : bounds) {
    SCOPED_TRACE(std::string(ggml_type_info(b.type).name));
    const auto bytes = quantize_ggml(b.type, x);
    ASSERT_TRUE(bytes.ok()) << bytes.error().message;
    ASSERT_EQ(bytes->size(), x.size() / static_cast<size_t>(ggml_type_info(b.type).block_elems) *
                                 static_cast<size_t>(ggml_type_info(b.type).block_bytes));
    const std::vector<float> y = dequantized(b.type, *bytes, x.size());
    double err2 = 0;
    double x2 = 0;
    for (size_t e = 0; e < x.size(); ++e) {
      const float half_step = std::fabs(step_of(b.type, *bytes, e)) / 2;
      ASSERT_LE(std::fabs(x[e] - y[e]), half_step * (1 + 1e-5f) + 1e-6f) << "element " << e;
      err2 += (x[e] - y[e]) * (x[e] - y[e]);
      x2 += x[e] * x[e];
    }
    EXPECT_LT(std::sqrt(err2 / x2), b.max_relative_rms);
  }
}

TEST(GgmlBlocks, FloatTypesRoundTripToTheirPrecision) {
  const std::vector<float> x = gaussian(64, 3);
  const struct {
    GgmlType type;
    float relative;
  } cases[] = {
      {GgmlType::kF32, 0.0f}, {GgmlType::kF16, 1.0f / 2048}, {GgmlType::kBF16, 1.0f / 256}};
  for (const auto& c : cases) {
    const std::vector<float> y = dequantized(c.type, quantize_ggml(c.type, x).value(), x.size());
    for (size_t e = 0; e < x.size(); ++e) {
      EXPECT_LE(std::fabs(x[e] - y[e]), std::fabs(x[e]) * c.relative + 1e-7f)
          << ggml_type_info(c.type).name << " element " << e;
    }
  }
}

TEST(GgmlBlocks, ConstantAndZeroBlocksAreExactWhereTheFormatAllows) {
  for (const GgmlType type :
       {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const std::vector<float> zeros(256, 0.0f);
    EXPECT_EQ(dequantized(type, quantize_ggml(type, zeros).value(), 256), zeros)
        << ggml_type_info(type).name;
  }
  // All-negative sub-blocks: the K-quant min must reach below them.
  const std::vector<float> negative(256, -3.0f);
  const std::vector<float> y =
      dequantized(GgmlType::kQ4_K, quantize_ggml(GgmlType::kQ4_K, negative).value(), 256);
  for (const float v : y) EXPECT_NEAR(v, -3.0f, 0.05f);
}

TEST(GgmlBlocks, RefusesPartialBlocksWrongSizesAndNonFiniteValues) {
  std::vector<float> out(32);
  EXPECT_FALSE(dequantize_ggml(GgmlType::kQ8_0, std::string(33, '\0'), out).ok());
  std::vector<float> partial(40);
  const Status s = dequantize_ggml(GgmlType::kQ8_0, std::string(68, '\0'), partial);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("Q8_0"), std::string::npos);
  EXPECT_FALSE(quantize_ggml(GgmlType::kQ4_K, std::vector<float>(255, 0.0f)).ok());
  std::vector<float> bad(32, 1.0f);
  bad[3] = std::nanf("");
  EXPECT_FALSE(quantize_ggml(GgmlType::kQ8_0, bad).ok());
  bad[3] = 1e6f;
  EXPECT_FALSE(quantize_ggml(GgmlType::kQ8_0, bad).ok());
}

}  // namespace
}  // namespace ib
