// GGUF files from the project's writer, for checks outside the unit tests.
//   gguf_fixture OUT.gguf       every metadata value type and every supported tensor type; prints
//                               as JSON what was written and where the project's reader found the
//                               tensors (gguf_npm_test.cjs compares that with @huggingface/gguf)
//   gguf_fixture --corpus DIR   the seed corpus of fuzz/gguf_fuzz.cpp: valid files (a tiny llama
//                               model with its tokenizer) and corrupt variants of them
//   gguf_fixture --dummy MODEL TYPE OUT.gguf [THREADS]
//                               a preset's (or config.json directory's) shapes with seeded
//                               weights, the matrices in TYPE (Q4_K_M, Q5_K_M, Q8_0, ...): a GGUF
//                               file to benchmark --quantization gguf without a download
// Exit 2 on a usage error, 1 when writing fails.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/fs.h"
#include "model/gguf.h"
#include "model/presets.h"

namespace ib {
namespace {

using V = GgufValueType;
using nlohmann::json;

std::vector<GgufMetadata> metadata() {
  return {
      {"general.architecture", GgufValue::of_string("llama")},
      {"general.alignment", GgufValue::of_uint(V::kU32, 64)},
      {"llama.context_length", GgufValue::of_uint(V::kU32, 8192)},
      {"llama.rope.freq_base", GgufValue::of_float(V::kF32, 500000.0)},
      {"test.u8", GgufValue::of_uint(V::kU8, 200)},
      {"test.i8", GgufValue::of_int(V::kI8, -100)},
      {"test.u16", GgufValue::of_uint(V::kU16, 60000)},
      {"test.i16", GgufValue::of_int(V::kI16, -30000)},
      {"test.i32", GgufValue::of_int(V::kI32, -2000000000)},
      {"test.u64", GgufValue::of_uint(V::kU64, 18000000000000000000ull)},
      {"test.i64", GgufValue::of_int(V::kI64, -9000000000000000000ll)},
      {"test.f64", GgufValue::of_float(V::kF64, 0.1)},
      {"test.bool", GgufValue::of_bool(false)},
      {"tokenizer.ggml.tokens", GgufValue::of_strings({"<s>", "\xC4\xA0the", "\xE2\x96\x81", ""})},
      {"tokenizer.ggml.token_type",
       GgufValue::of_array(V::kI32,
                           {GgufValue::of_int(V::kI32, 3), GgufValue::of_int(V::kI32, 1),
                            GgufValue::of_int(V::kI32, 1), GgufValue::of_int(V::kI32, 6)})},
  };
}

Result<std::vector<GgufWriteTensor>> tensors() {
  const struct {
    const char* name;
    GgmlType type;
    std::vector<int64_t> dims;
  } specs[] = {
      {"token_embd.weight", GgmlType::kQ4_K, {256, 4}},
      {"blk.0.attn_q.weight", GgmlType::kQ8_0, {64, 3}},
      {"blk.0.attn_k.weight", GgmlType::kQ4_0, {32, 2, 2}},
      {"blk.0.ffn_up.weight", GgmlType::kQ5_K, {512, 1}},
      {"blk.0.ffn_down.weight", GgmlType::kQ6_K, {256, 2}},
      {"blk.0.attn_norm.weight", GgmlType::kF32, {7}},
      {"output_norm.weight", GgmlType::kF16, {5, 3}},
      {"output.weight", GgmlType::kBF16, {3, 2, 2, 2}},
  };
  std::vector<GgufWriteTensor> out;
  for (const auto& s : specs) {
    const int64_t n =
        std::accumulate(s.dims.begin(), s.dims.end(), int64_t{1}, std::multiplies<>());
    std::vector<float> values(static_cast<size_t>(n));
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<float>(i % 17) * 0.125f - 1.0f;
    IB_ASSIGN_OR_RETURN(std::string bytes, quantize_ggml(s.type, values));
    out.push_back({s.name, s.type, s.dims, std::move(bytes)});
  }
  return out;
}

// A value as JSON; 64-bit integers as strings (JavaScript numbers lose them).
json value_json(const GgufValue& v) {
  if (const auto* a = v.as_array()) {
    json items = json::array();
    for (const auto& item : a->items) items.push_back(value_json(item));
    return items;
  }
  if (const auto* u = std::get_if<uint64_t>(&v.value)) return std::to_string(*u);
  if (const auto* i = std::get_if<int64_t>(&v.value)) return std::to_string(*i);
  if (const auto* f = std::get_if<double>(&v.value)) {
    return v.type == V::kF32 ? static_cast<double>(static_cast<float>(*f)) : *f;
  }
  if (const auto* b = std::get_if<bool>(&v.value)) return *b;
  return *v.as_string();
}

// A tiny llama model: the config keys, a gpt2 tokenizer and one layer of Q8_0 / Q4_K weights.
Result<std::string> tiny_llama() {
  const auto u32 = [](uint64_t v) { return GgufValue::of_uint(V::kU32, v); };
  const std::vector<GgufMetadata> meta = {
      {"general.architecture", GgufValue::of_string("llama")},
      {"llama.context_length", u32(64)},
      {"llama.embedding_length", u32(256)},
      {"llama.block_count", u32(1)},
      {"llama.feed_forward_length", u32(512)},
      {"llama.attention.head_count", u32(4)},
      {"llama.attention.head_count_kv", u32(2)},
      {"llama.rope.freq_base", GgufValue::of_float(V::kF32, 10000.0)},
      {"llama.attention.layer_norm_rms_epsilon", GgufValue::of_float(V::kF32, 1e-5)},
      {"tokenizer.ggml.model", GgufValue::of_string("gpt2")},
      {"tokenizer.ggml.pre", GgufValue::of_string("llama-bpe")},
      {"tokenizer.ggml.tokens", GgufValue::of_strings({"h", "i", "hi", "<|end|>"})},
      {"tokenizer.ggml.token_type",
       GgufValue::of_array(V::kI32,
                           {GgufValue::of_int(V::kI32, 1), GgufValue::of_int(V::kI32, 1),
                            GgufValue::of_int(V::kI32, 1), GgufValue::of_int(V::kI32, 3)})},
      {"tokenizer.ggml.merges", GgufValue::of_strings({"h i"})},
      {"tokenizer.ggml.eos_token_id", u32(3)},
  };
  std::vector<float> values(256 * 4);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 9) * 0.5f - 2.0f;
  IB_ASSIGN_OR_RETURN(std::string q8, quantize_ggml(GgmlType::kQ8_0, values));
  IB_ASSIGN_OR_RETURN(std::string q4k, quantize_ggml(GgmlType::kQ4_K, values));
  return serialize_gguf(meta, {{"token_embd.weight", GgmlType::kQ8_0, {256, 4}, q8},
                               {"blk.0.attn_q.weight", GgmlType::kQ4_K, {256, 4}, q4k}});
}

Status write_corpus(const std::filesystem::path& dir) {
  IB_ASSIGN_OR_RETURN(const std::string llama, tiny_llama());
  IB_ASSIGN_OR_RETURN(const auto written, tensors());
  IB_ASSIGN_OR_RETURN(const std::string all_types, serialize_gguf(metadata(), written));
  std::filesystem::create_directories(dir);
  auto patched = [](std::string bytes, size_t at, uint32_t v) {
    std::memcpy(bytes.data() + at, &v, 4);
    return bytes;
  };
  const size_t type_at = llama.find("token_embd.weight") + 17 + 4 + 16;  // after name, n_dims, dims
  const std::pair<const char*, std::string> seeds[] = {
      {"tiny_llama.gguf", llama},
      {"all_types.gguf", all_types},
      {"truncated_header.gguf", llama.substr(0, 100)},
      {"truncated_data.gguf", llama.substr(0, llama.size() - 40)},
      {"version2.gguf", patched(llama, 4, 2)},
      {"unknown_tensor_type.gguf", patched(llama, type_at, 3)},
      {"huge_metadata_count.gguf", patched(llama, 20, 0x40000000)},
  };
  for (const auto& [name, bytes] : seeds) IB_TRY(write_file_atomic(dir / name, bytes));
  return Ok{};
}

int run(const std::string& path) {
  const auto written = tensors();
  Status s = written.ok() ? write_gguf(path, metadata(), *written) : Status(written.error());
  if (!s.ok()) {
    std::fprintf(stderr, "gguf_fixture: %s\n", s.error().message.c_str());
    return 1;
  }
  const auto mapped = GgufModelFile::open(path);
  if (!mapped.ok()) {
    std::fprintf(stderr, "gguf_fixture: %s\n", mapped.error().message.c_str());
    return 1;
  }
  const GgufFile& file = (*mapped)->file();
  json out = {{"tensor_data_offset", file.data_offset}, {"alignment", file.alignment}};
  for (const auto& m : metadata()) {
    json entry = {{"key", m.key},
                  {"type", static_cast<uint32_t>(m.value.type)},
                  {"value", value_json(m.value)}};
    if (const auto* a = m.value.as_array())
      entry["sub_type"] = static_cast<uint32_t>(a->element_type);
    out["metadata"].push_back(entry);
  }
  for (size_t i = 0; i < written->size(); ++i) {
    const GgufWriteTensor& w = (*written)[i];
    const GgufTensorInfo& t = file.tensors[i];
    out["tensors"].push_back({{"name", w.name},
                              {"dims", w.dims},
                              {"type", static_cast<uint32_t>(w.type)},
                              {"offset", t.offset},
                              {"size_bytes", w.bytes.size()}});
  }
  std::printf("%s\n", out.dump(1).c_str());
  return 0;
}

int dummy(const std::string& model, const std::string& type, const std::string& path, int threads) {
  auto config = resolve_model(model);
  auto mix = gguf_type_mix(type);
  Status s = !config.ok() ? Status(config.error())
             : !mix.ok()  ? Status(mix.error())
                          : write_dummy_gguf(path, *config, *mix, 0, threads);
  if (!s.ok()) {
    std::fprintf(stderr, "gguf_fixture: %s\n", s.error().message.c_str());
    return s.error().kind == ErrorKind::kUser ? 2 : 1;
  }
  return 0;
}

}  // namespace
}  // namespace ib

int main(int argc, char** argv) {
  if ((argc == 5 || argc == 6) && std::strcmp(argv[1], "--dummy") == 0) {
    return ib::dummy(argv[2], argv[3], argv[4], argc == 6 ? std::atoi(argv[5]) : 1);
  }
  if (argc == 3 && std::strcmp(argv[1], "--corpus") == 0) {
    const ib::Status s = ib::write_corpus(argv[2]);
    if (!s.ok()) std::fprintf(stderr, "gguf_fixture: %s\n", s.error().message.c_str());
    return s.ok() ? 0 : 1;
  }
  if (argc != 2 || argv[1][0] == '-') {
    std::fprintf(stderr,
                 "usage: gguf_fixture OUT.gguf | gguf_fixture --corpus DIR | gguf_fixture "
                 "--dummy MODEL TYPE OUT.gguf [THREADS]\n");
    return 2;
  }
  return ib::run(argv[1]);
}
