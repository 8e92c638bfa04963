#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/fs.h"

namespace ib {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ =
        fs::temp_directory_path() / ("ib_st_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string f32_bytes(const std::vector<float>& v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

std::string u16_bytes(const std::vector<uint16_t>& v) {
  std::string s(v.size() * 2, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

// A raw safetensors file: little-endian length, header text, data.
std::string raw_file(const std::string& header, const std::string& data, uint64_t length) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i)
    s[static_cast<size_t>(i)] = static_cast<char>((length >> (8 * i)) & 0xff);
  return s + header + data;
}
std::string raw_file(const std::string& header, const std::string& data) {
  return raw_file(header, data, header.size());
}

void write_raw(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<SafetensorsWriteTensor> sample_tensors() {
  return {
      {"model.embed_tokens.weight", DType::kF32, {2, 3}, f32_bytes({1, 2, 3, 4, 5, 6})},
      {"model.norm.weight",
       DType::kBF16,
       {3},
       u16_bytes({f32_to_bf16_bits(0.5f), f32_to_bf16_bits(-2.0f), f32_to_bf16_bits(3.0f)})},
      {"lm_head.weight",
       DType::kF16,
       {1, 2},
       u16_bytes({f32_to_f16_bits(1.5f), f32_to_f16_bits(-0.25f)})},
      {"empty", DType::kF32, {0, 4}, ""},
  };
}

float f32_at(const HostTensorRef& t, size_t i) {
  float f;
  std::memcpy(&f, static_cast<const char*>(t.data) + 4 * i, 4);
  return f;
}
uint16_t u16_at(const HostTensorRef& t, size_t i) {
  uint16_t h;
  std::memcpy(&h, static_cast<const char*>(t.data) + 2 * i, 2);
  return h;
}

TEST(Safetensors, RoundTripSingleFile) {
  TempDir dir;
  const fs::path file = dir.path() / "model.safetensors";
  ASSERT_TRUE(write_safetensors(file.string(), sample_tensors(), {{"format", "pt"}}).ok());
  EXPECT_FALSE(fs::exists(file.string() + ".tmp"));

  // Header padded so the data section is 8-byte aligned.
  const auto bytes = read_file(file);
  ASSERT_TRUE(bytes.ok());
  const auto layout = parse_safetensors_file(*bytes, "model.safetensors");
  ASSERT_TRUE(layout.ok()) << layout.error().message;
  EXPECT_EQ(layout->data_offset % 8, 0u);
  EXPECT_EQ(layout->header.metadata.at("format"), "pt");

  for (const std::string& path : {dir.path().string(), file.string()}) {
    EXPECT_TRUE(has_safetensors(path));
    auto ckpt = SafetensorsCheckpoint::open(path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.error().message;
    EXPECT_EQ((*ckpt)->names().size(), 4u);
    EXPECT_EQ((*ckpt)->files(), std::vector<std::string>{file.string()});
    EXPECT_TRUE((*ckpt)->contains("model.norm.weight"));
    EXPECT_FALSE((*ckpt)->contains("model.layers.0.mlp.up_proj.weight"));

    auto embed = (*ckpt)->get("model.embed_tokens.weight");
    ASSERT_TRUE(embed.ok());
    EXPECT_EQ(embed->dtype, DType::kF32);
    EXPECT_EQ(embed->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(embed->numel(), 6);
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(f32_at(*embed, i), static_cast<float>(i + 1));

    auto norm = (*ckpt)->get("model.norm.weight");
    ASSERT_TRUE(norm.ok());
    EXPECT_EQ(norm->dtype, DType::kBF16);
    EXPECT_EQ(bf16_bits_to_f32(u16_at(*norm, 1)), -2.0f);

    auto head = (*ckpt)->get("lm_head.weight");
    ASSERT_TRUE(head.ok());
    EXPECT_EQ(head->dtype, DType::kF16);
    EXPECT_EQ(f16_bits_to_f32(u16_at(*head, 0)), 1.5f);
    EXPECT_EQ(f16_bits_to_f32(u16_at(*head, 1)), -0.25f);

    auto empty = (*ckpt)->get("empty");
    ASSERT_TRUE(empty.ok());
    EXPECT_EQ(empty->numel(), 0);

    auto missing = (*ckpt)->get("nope");
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.error().message.find("'nope' is not in the checkpoint"), std::string::npos);
  }
}

TEST(Safetensors, RoundTripTwoShardIndex) {
  TempDir dir;
  auto tensors = sample_tensors();
  const std::vector<SafetensorsWriteTensor> shard1(tensors.begin(), tensors.begin() + 2);
  const std::vector<SafetensorsWriteTensor> shard2(tensors.begin() + 2, tensors.end());
  ASSERT_TRUE(
      write_safetensors((dir.path() / "model-00001-of-00002.safetensors").string(), shard1).ok());
  ASSERT_TRUE(
      write_safetensors((dir.path() / "model-00002-of-00002.safetensors").string(), shard2).ok());
  ASSERT_TRUE(write_file_atomic(dir.path() / "model.safetensors.index.json", R"({
    "metadata": {"total_size": 42},
    "weight_map": {
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "model.norm.weight": "model-00001-of-00002.safetensors",
      "lm_head.weight": "model-00002-of-00002.safetensors",
      "empty": "model-00002-of-00002.safetensors"
    }})")
                  .ok());
  EXPECT_TRUE(has_safetensors(dir.path().string()));
  auto ckpt = SafetensorsCheckpoint::open(dir.path().string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.error().message;
  EXPECT_EQ((*ckpt)->files().size(), 2u);
  EXPECT_EQ((*ckpt)->names().size(), 4u);
  auto embed = (*ckpt)->get("model.embed_tokens.weight");
  ASSERT_TRUE(embed.ok());
  EXPECT_EQ(f32_at(*embed, 5), 6.0f);
  auto head = (*ckpt)->get("lm_head.weight");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(f16_bits_to_f32(u16_at(*head, 1)), -0.25f);
}

// Opens bytes written to a file and returns the error message ("" when it opened).
std::string open_error(const TempDir& dir, const std::string& bytes) {
  const fs::path file = dir.path() / "bad.safetensors";
  write_raw(file, bytes);
  auto ckpt = SafetensorsCheckpoint::open(file.string());
  return ckpt.ok() ? "" : ckpt.error().message;
}

void expect_contains(const std::string& message, const std::string& part) {
  EXPECT_NE(message.find(part), std::string::npos) << "message: " << message;
}

TEST(Safetensors, MalformedFilesGiveClearErrors) {
  TempDir dir;
  const std::string ok_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_EQ(open_error(dir, raw_file(ok_header, std::string(8, '\0'))), "");

  expect_contains(open_error(dir, "abc"), "shorter than the 8-byte header length");
  expect_contains(open_error(dir, ""), "shorter than the 8-byte header length");
  expect_contains(open_error(dir, raw_file(ok_header, "", 1'000'000)), "header length 1000000");
  expect_contains(open_error(dir, raw_file(ok_header, "", ~uint64_t{0})), "exceeds");
  // Truncated: the header promises 8 data bytes, the file has 4.
  expect_contains(open_error(dir, raw_file(ok_header, std::string(4, '\0'))),
                  "outside the 4-byte data section");
  expect_contains(open_error(dir, raw_file(R"({"a": )", "")), "not valid JSON");
  expect_contains(open_error(dir, raw_file(R"([1, 2])", "")), "does not start with '{'");
  expect_contains(open_error(dir, raw_file(R"({"a": 3})", "")), "tensor 'a' is not a JSON object");
  expect_contains(
      open_error(dir, raw_file(R"({"a":{"dtype":"I16","shape":[2],"data_offsets":[0,2]}})", "xx")),
      "dtype I16, which inferbench cannot load");
  expect_contains(
      open_error(dir, raw_file(R"({"a":{"dtype":"Q9","shape":[2],"data_offsets":[0,2]}})", "xx")),
      "unknown dtype \"Q9\"");
  expect_contains(open_error(dir, raw_file(R"({"a":{"shape":[2],"data_offsets":[0,2]}})", "xx")),
                  "missing or non-string \"dtype\"");
  expect_contains(
      open_error(dir, raw_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",
                               std::string(8, '\0'))),
      "non-negative integers");
  expect_contains(
      open_error(dir, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})",
                               std::string(9, '\0'))),
      "[begin, end]");
  expect_contains(
      open_error(dir, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})",
                               std::string(8, '\0'))),
      "outside");
  expect_contains(
      open_error(dir, raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                               std::string(8, '\0'))),
      "span 8 bytes but shape [3] of F32 needs 12");
  expect_contains(
      open_error(dir, raw_file(R"({"a":{"dtype":"F32","shape":[2147483648,2147483648,2],)"
                               R"("data_offsets":[0,8]}})",
                               std::string(8, '\0'))),
      "needs more than 2^64");
  expect_contains(open_error(dir, raw_file(R"({"__metadata__":{"k":1}})", "")),
                  "\"__metadata__\" value for \"k\" is not a string");
  // Every message names the file.
  expect_contains(open_error(dir, "abc"), "bad.safetensors");
}

TEST(Safetensors, HeaderParserAcceptsSpecLayout) {
  // Padding spaces after the JSON and tensors sharing bytes are allowed by the format.
  const auto h = parse_safetensors_header(
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[],"data_offsets":[0,2]},)"
      R"("c":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}}    )",
      2);
  ASSERT_TRUE(h.ok()) << h.error().message;
  EXPECT_EQ(h->tensors.size(), 2u);
  EXPECT_TRUE(h->tensors.at("b").shape.empty());
  EXPECT_EQ(h->metadata.at("format"), "pt");
}

TEST(Safetensors, IndexErrors) {
  TempDir dir;
  const auto tensors = sample_tensors();
  ASSERT_TRUE(write_safetensors((dir.path() / "s1.safetensors").string(), {tensors[0]}).ok());
  auto index_error = [&](const std::string& index) {
    EXPECT_TRUE(write_file_atomic(dir.path() / "model.safetensors.index.json", index).ok());
    auto ckpt = SafetensorsCheckpoint::open(dir.path().string());
    return ckpt.ok() ? std::string() : ckpt.error().message;
  };
  EXPECT_EQ(index_error(R"({"weight_map":{"model.embed_tokens.weight":"s1.safetensors"}})"), "");
  expect_contains(index_error(R"({"weight_map":{"x":"s2.safetensors"}})"),
                  "names shard s2.safetensors, which is missing");
  expect_contains(index_error(R"({"weight_map":{"x":"s1.safetensors"}})"), "'x' is mapped to");
  expect_contains(index_error(R"({"weight_map":{"x":"../s1.safetensors"}})"),
                  "must be a shard file name inside the model directory");
  expect_contains(index_error(R"({"weight_map":{"x":7}})"), "must be a shard file name");
  expect_contains(index_error(R"({"metadata":{}})"), "no \"weight_map\"");
  expect_contains(index_error("{oops"), "is not a JSON object");
}

TEST(Safetensors, MissingWeights) {
  TempDir dir;
  EXPECT_FALSE(has_safetensors(dir.path().string()));
  auto ckpt = SafetensorsCheckpoint::open(dir.path().string());
  ASSERT_FALSE(ckpt.ok());
  expect_contains(ckpt.error().message, "holds neither model.safetensors");
  auto none = SafetensorsCheckpoint::open((dir.path() / "nothing").string());
  ASSERT_FALSE(none.ok());
  expect_contains(none.error().message, "no such file or directory");
}

TEST(Safetensors, WriterRejectsBadInput) {
  TempDir dir;
  const std::string path = (dir.path() / "w.safetensors").string();
  expect_contains(write_safetensors(path, {{"a", DType::kF32, {3}, "xx"}}).error().message,
                  "2 bytes given for shape [3] of F32");
  expect_contains(
      write_safetensors(path, {{"a", DType::kF32, {0}, ""}, {"a", DType::kF32, {0}, ""}})
          .error()
          .message,
      "duplicate");
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace ib
