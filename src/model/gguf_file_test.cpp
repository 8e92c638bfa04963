// GGUF reader and writer: round trips of every value type, alignment, atomic writes, and the
// errors that versions, tensor types, shapes, truncation and corrupt counts must produce.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/gguf.h"

namespace ib {
namespace {

using V = GgufValueType;

std::string f32_bytes(const std::vector<float>& v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

std::vector<GgufMetadata> every_value_type() {
  return {
      {"general.architecture", GgufValue::of_string("llama")},
      {"u8", GgufValue::of_uint(V::kU8, 255)},
      {"i8", GgufValue::of_int(V::kI8, -128)},
      {"u16", GgufValue::of_uint(V::kU16, 65535)},
      {"i16", GgufValue::of_int(V::kI16, -32768)},
      {"u32", GgufValue::of_uint(V::kU32, 4000000000u)},
      {"i32", GgufValue::of_int(V::kI32, -2000000000)},
      {"u64", GgufValue::of_uint(V::kU64, 1ull << 63)},
      {"i64", GgufValue::of_int(V::kI64, -(1ll << 62))},
      {"f32", GgufValue::of_float(V::kF32, 0.5)},
      {"f64", GgufValue::of_float(V::kF64, 1e-300)},
      {"bool", GgufValue::of_bool(true)},
      {"empty", GgufValue::of_string("")},
      {"strings", GgufValue::of_strings({"a", "", "\xC4\xA0the"})},
      {"ints", GgufValue::of_array(
                   V::kI32, {GgufValue::of_int(V::kI32, -1), GgufValue::of_int(V::kI32, 7)})},
      {"nested", GgufValue::of_array(V::kArray, {GgufValue::of_strings({"x"})})},
  };
}

std::vector<GgufWriteTensor> three_tensors() {
  std::vector<float> rows(64);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i) * 0.25f - 3.0f;
  return {
      {"token_embd.weight",
       GgmlType::kF32,
       {8, 2},
       f32_bytes(std::vector<float>(rows.begin(), rows.begin() + 16))},
      {"blk.0.attn_q.weight",
       GgmlType::kQ8_0,
       {32, 2},
       quantize_ggml(GgmlType::kQ8_0, rows).value()},
      {"output_norm.weight", GgmlType::kF16, {3}, std::string(6, '\x11')},
  };
}

std::string valid_file() {
  return serialize_gguf(every_value_type(), three_tensors()).value();
}

// Byte position just after the first occurrence of text in bytes.
size_t after(const std::string& bytes, const std::string& text) {
  const size_t at = bytes.find(text);
  EXPECT_NE(at, std::string::npos) << text;
  return at + text.size();
}

template <typename T>
void poke(std::string& bytes, size_t at, T v) {
  std::memcpy(bytes.data() + at, &v, sizeof(T));
}

std::string error_of(const std::string& bytes) {
  const auto r = parse_gguf(bytes, "m.gguf");
  EXPECT_FALSE(r.ok());
  return r.ok() ? std::string() : r.error().message;
}

TEST(GgufFile, RoundTripsEveryValueType) {
  const auto file = parse_gguf(valid_file(), "m.gguf");
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(file->version, 3u);
  const auto expected = every_value_type();
  ASSERT_EQ(file->metadata.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(expected[i].key);
    EXPECT_EQ(file->metadata[i].key, expected[i].key);
    EXPECT_EQ(file->metadata[i].value.type, expected[i].value.type);
  }
  EXPECT_EQ(file->find("u8")->as_int(), 255);
  EXPECT_EQ(file->find("i8")->as_int(), -128);
  EXPECT_EQ(file->find("u16")->as_int(), 65535);
  EXPECT_EQ(file->find("i16")->as_int(), -32768);
  EXPECT_EQ(file->find("u32")->as_int(), 4000000000ll);
  EXPECT_EQ(file->find("i32")->as_int(), -2000000000);
  EXPECT_EQ(std::get<uint64_t>(file->find("u64")->value), 1ull << 63);
  EXPECT_FALSE(file->find("u64")->as_int().has_value());  // does not fit int64
  EXPECT_EQ(file->find("i64")->as_int(), -(1ll << 62));
  EXPECT_EQ(file->find("f32")->as_number(), 0.5);
  EXPECT_EQ(file->find("f64")->as_number(), 1e-300);
  EXPECT_EQ(std::get<bool>(file->find("bool")->value), true);
  EXPECT_EQ(*file->find("empty")->as_string(), "");
  const GgufArray* strings = file->find("strings")->as_array();
  ASSERT_NE(strings, nullptr);
  EXPECT_EQ(strings->element_type, V::kString);
  ASSERT_EQ(strings->items.size(), 3u);
  EXPECT_EQ(*strings->items[2].as_string(), "\xC4\xA0the");
  const GgufArray* ints = file->find("ints")->as_array();
  ASSERT_EQ(ints->items.size(), 2u);
  EXPECT_EQ(ints->items[0].as_int(), -1);
  EXPECT_EQ(ints->items[1].as_int(), 7);
  const GgufArray* nested = file->find("nested")->as_array();
  ASSERT_EQ(nested->items.size(), 1u);
  EXPECT_EQ(*nested->items[0].as_array()->items[0].as_string(), "x");
  EXPECT_EQ(file->find("absent"), nullptr);
}

TEST(GgufFile, TensorInfosAndDataAreWhereTheWriterPutThem) {
  const std::string bytes = valid_file();
  const auto file = parse_gguf(bytes, "m.gguf");
  ASSERT_TRUE(file.ok()) << file.error().message;
  const auto written = three_tensors();
  ASSERT_EQ(file->tensors.size(), written.size());
  EXPECT_EQ(file->alignment, 32u);
  EXPECT_EQ(file->data_offset % 32, 0u);
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < written.size(); ++i) {
    const GgufTensorInfo& t = file->tensors[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, written[i].name);
    EXPECT_EQ(t.type, written[i].type);
    EXPECT_EQ(t.dims, written[i].dims);
    EXPECT_EQ(t.offset, expected_offset);
    EXPECT_EQ(t.size_bytes, written[i].bytes.size());
    EXPECT_EQ(bytes.substr(file->data_offset + t.offset, t.size_bytes), written[i].bytes);
    expected_offset = (t.offset + t.size_bytes + 31) / 32 * 32;
  }
  EXPECT_EQ(file->tensors[1].size_bytes, 2u * 34u);  // two Q8_0 blocks
  EXPECT_EQ(file->find_tensor("output_norm.weight")->numel(), 3);
}

TEST(GgufFile, HonoursGeneralAlignment) {
  auto metadata = every_value_type();
  metadata.push_back({"general.alignment", GgufValue::of_uint(V::kU32, 256)});
  const auto file = parse_gguf(serialize_gguf(metadata, three_tensors()).value(), "m.gguf");
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(file->alignment, 256u);
  EXPECT_EQ(file->data_offset % 256, 0u);
  for (const auto& t : file->tensors) EXPECT_EQ(t.offset % 256, 0u) << t.name;
  metadata.back().value = GgufValue::of_uint(V::kU32, 48);
  EXPECT_FALSE(serialize_gguf(metadata, three_tensors()).ok());
}

TEST(GgufFile, WritesAtomicallyAndMapsTensorBytes) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ib_gguf_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "m.gguf").string();
  ASSERT_TRUE(write_gguf(path, every_value_type(), three_tensors()).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const auto mapped = GgufModelFile::open(path);
  ASSERT_TRUE(mapped.ok()) << mapped.error().message;
  const auto written = three_tensors();
  for (size_t i = 0; i < written.size(); ++i) {
    EXPECT_EQ((*mapped)->tensor_bytes((*mapped)->file().tensors[i]), written[i].bytes);
  }
  const auto q8 = read_gguf_tensor_f32(**mapped, "blk.0.attn_q.weight");
  ASSERT_TRUE(q8.ok()) << q8.error().message;
  std::vector<float> expected(64);
  ASSERT_TRUE(dequantize_ggml(GgmlType::kQ8_0, written[1].bytes, expected).ok());
  EXPECT_EQ(*q8, expected);
  const auto absent = read_gguf_tensor_f32(**mapped, "nope");
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.error().message.find("m.gguf: no tensor 'nope'"), std::string::npos);
  EXPECT_TRUE(is_gguf_file(path));
  EXPECT_FALSE(is_gguf_file((dir / "none.gguf").string()));
  const auto missing = GgufModelFile::open((dir / "none.gguf").string());
  EXPECT_FALSE(missing.ok());
  fs::remove_all(dir);
}

TEST(GgufFile, RefusesOtherVersionsAndMagicsNamingThem) {
  std::string bytes = valid_file();
  poke<uint32_t>(bytes, 4, 2);
  EXPECT_NE(error_of(bytes).find("GGUF version 2 is not supported"), std::string::npos);
  poke<uint32_t>(bytes, 4, 1);
  EXPECT_NE(error_of(bytes).find("GGUF version 1 is not supported"), std::string::npos);
  poke<uint32_t>(bytes, 4, 7);
  EXPECT_NE(error_of(bytes).find("unknown GGUF version 7"), std::string::npos);
  bytes[0] = 'X';
  EXPECT_NE(error_of(bytes).find("not a GGUF file"), std::string::npos);
}

TEST(GgufFile, RefusesUnsupportedTensorTypesNamingTypeAndTensor) {
  std::string bytes = valid_file();
  // output_norm.weight: name, n_dims (4), dims (8), then the type.
  const size_t type_at = after(bytes, "output_norm.weight") + 4 + 8;
  poke<uint32_t>(bytes, type_at, 3);
  std::string e = error_of(bytes);
  EXPECT_NE(e.find("'output_norm.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("Q4_1 (3)"), std::string::npos) << e;
  poke<uint32_t>(bytes, type_at, 99);
  e = error_of(bytes);
  EXPECT_NE(e.find("unknown ggml type 99"), std::string::npos) << e;
}

TEST(GgufFile, RefusesRowsThatAreNotWholeBlocks) {
  std::string bytes = valid_file();
  poke<uint64_t>(bytes, after(bytes, "blk.0.attn_q.weight") + 4, 48);  // ne[0] of a Q8_0 tensor
  const std::string e = error_of(bytes);
  EXPECT_NE(e.find("'blk.0.attn_q.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("not a multiple of the 32-element blocks of Q8_0"), std::string::npos) << e;
}

TEST(GgufFile, EveryTruncationIsAnErrorNotACrash) {
  const std::string bytes = valid_file();
  const auto file = parse_gguf(bytes, "m.gguf").value();
  uint64_t end = 0;
  for (const auto& t : file.tensors)
    end = std::max(end, file.data_offset + t.offset + t.size_bytes);
  for (size_t n = 0; n < end; ++n) {
    EXPECT_FALSE(parse_gguf(bytes.substr(0, n), "m.gguf").ok()) << n << " bytes";
  }
  EXPECT_TRUE(parse_gguf(bytes.substr(0, end), "m.gguf").ok());  // the trailing padding is optional
  EXPECT_NE(error_of(bytes.substr(0, 20)).find("truncated or corrupt"), std::string::npos);
}

TEST(GgufFile, RefusesCountsSizesAndOffsetsBeyondTheFile) {
  const std::string good = valid_file();
  std::string bytes = good;
  poke<uint64_t>(bytes, 8, 1ull << 62);  // tensor count
  EXPECT_NE(error_of(bytes).find("tensor count"), std::string::npos);
  bytes = good;
  poke<uint64_t>(bytes, 16, ~0ull);  // metadata count
  EXPECT_NE(error_of(bytes).find("metadata count"), std::string::npos);
  bytes = good;
  poke<uint64_t>(bytes, 24, ~0ull);  // the first key's length
  EXPECT_NE(error_of(bytes).find("metadata key 0"), std::string::npos);
  bytes = good;
  poke<uint64_t>(bytes, after(bytes, "strings") + 4 + 4, 1ull << 60);  // array length
  EXPECT_NE(error_of(bytes).find("array 'strings'"), std::string::npos);
  bytes = good;
  poke<uint32_t>(bytes, after(bytes, "bool"), 77);  // value type
  EXPECT_NE(error_of(bytes).find("unknown value type 77"), std::string::npos);
  bytes = good;
  const size_t norm = after(bytes, "output_norm.weight");
  poke<uint64_t>(bytes, norm + 4, 1ull << 62);  // a dimension whose data is not in the file
  EXPECT_NE(error_of(bytes).find("outside the"), std::string::npos);
  bytes = good;
  poke<uint64_t>(bytes, norm + 4 + 8 + 4, ~0ull - 31);  // offset: aligned but overflowing
  EXPECT_NE(error_of(bytes).find("outside the"), std::string::npos);
  bytes = good;
  poke<uint64_t>(bytes, norm + 4 + 8 + 4, 8);  // offset not a multiple of 32
  EXPECT_NE(error_of(bytes).find("not a multiple of the alignment 32"), std::string::npos);
  bytes = good;
  poke<uint32_t>(bytes, after(bytes, "token_embd.weight"), 5);  // n_dims
  EXPECT_NE(error_of(bytes).find("5 dimensions"), std::string::npos);
}

TEST(GgufFile, BoundsTheMetadataArraysItHolds) {
  // A u8 array whose count (and bytes) exceed the parser's limit on array elements in all: every
  // byte is a valid value, so only the limit stops it growing with the file.
  constexpr uint64_t kCount = (uint64_t{1} << 23) + 1;
  std::vector<GgufValue> bytes(kCount, GgufValue::of_uint(V::kU8, 7));
  const std::string big =
      serialize_gguf({{"big", GgufValue::of_array(V::kU8, std::move(bytes))}}, {}).value();
  const std::string e = error_of(big);
  EXPECT_NE(e.find("more than 8388608 elements"), std::string::npos) << e;
}

TEST(GgufFile, RefusesMalformedValues) {
  // Arrays nested five deep (the parser allows four).
  GgufValue v = GgufValue::of_strings({"x"});
  for (int i = 0; i < 4; ++i) v = GgufValue::of_array(V::kArray, {v});
  std::string e = error_of(serialize_gguf({{"deep", v}}, {}).value());
  EXPECT_NE(e.find("nests arrays more than 4 deep"), std::string::npos) << e;
  // A bool byte other than 0 or 1.
  std::string bytes = serialize_gguf({{"flag", GgufValue::of_bool(true)}}, {}).value();
  bytes[after(bytes, "flag") + 4] = 2;
  e = error_of(bytes);
  EXPECT_NE(e.find("bool stored as 2"), std::string::npos) << e;
  // general.alignment as a uint64 (written under another key, which the writer does not check,
  // then renamed), and as a uint32 that is not a power of two.
  bytes = serialize_gguf({{"general.alignmenT", GgufValue::of_uint(V::kU64, 64)}}, {}).value();
  bytes[after(bytes, "general.alignmenT") - 1] = 't';
  e = error_of(bytes);
  EXPECT_NE(e.find("general.alignment must be a uint32 power of two"), std::string::npos) << e;
  bytes = serialize_gguf({{"general.alignment", GgufValue::of_uint(V::kU32, 64)}}, {}).value();
  poke<uint32_t>(bytes, after(bytes, "general.alignment") + 4, 48);
  EXPECT_NE(error_of(bytes).find("power of two"), std::string::npos);
}

TEST(GgufFile, RecognisesGgufFilesByTheirMagic) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ib_gguf_magic_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ASSERT_TRUE(write_gguf((dir / "a.bin").string(), {}, {}).ok());
  std::ofstream((dir / "b.gguf").string()) << "GGU";
  EXPECT_TRUE(is_gguf_file((dir / "a.bin").string()));    // the magic, not the name
  EXPECT_FALSE(is_gguf_file((dir / "b.gguf").string()));  // too short for the magic
  EXPECT_FALSE(is_gguf_file(dir.string()));               // a directory
  fs::remove_all(dir);
}

TEST(GgufFile, WriterRefusesWhatItCannotWrite) {
  EXPECT_FALSE(serialize_gguf({{"x", GgufValue::of_uint(V::kU8, 256)}}, {}).ok());
  EXPECT_FALSE(serialize_gguf({{"x", GgufValue::of_int(V::kU32, 1)}}, {}).ok());
  EXPECT_FALSE(
      serialize_gguf({{"x", GgufValue::of_bool(true)}, {"x", GgufValue::of_bool(false)}}, {}).ok());
  EXPECT_FALSE(
      serialize_gguf({{"x", GgufValue::of_array(V::kU8, {GgufValue::of_bool(true)})}}, {}).ok());
  auto tensors = three_tensors();
  tensors[1].bytes.pop_back();
  EXPECT_FALSE(serialize_gguf({}, tensors).ok());
  tensors = three_tensors();
  tensors[1].dims = {16, 4};  // 16 is not a whole Q8_0 block
  EXPECT_FALSE(serialize_gguf({}, tensors).ok());
  tensors = three_tensors();
  tensors[2].name = tensors[0].name;
  EXPECT_FALSE(serialize_gguf({}, tensors).ok());
}

TEST(GgmlTypes, NamesAndBlocks) {
  EXPECT_EQ(ggml_type_info(GgmlType::kQ4_K).block_bytes, 144);
  EXPECT_EQ(ggml_type_info(GgmlType::kQ5_K).block_bytes, 176);
  EXPECT_EQ(ggml_type_info(GgmlType::kQ6_K).block_bytes, 210);
  EXPECT_EQ(ggml_type_of_id(30), GgmlType::kBF16);
  EXPECT_FALSE(ggml_type_of_id(3).has_value());
  EXPECT_EQ(ggml_type_id_name(16), "IQ2_XXS");
  EXPECT_EQ(ggml_type_id_name(4), "");
  EXPECT_EQ(ggml_type_of_name("q4_k"), GgmlType::kQ4_K);
}

}  // namespace
}  // namespace ib
