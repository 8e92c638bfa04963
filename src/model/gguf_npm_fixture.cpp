// Writes a GGUF file with every metadata value type and every supported tensor type through the
// project's writer, and prints as JSON what was written and where the project's reader found the
// tensors; gguf_npm_test.cjs parses the file with @huggingface/gguf and compares.
// Usage: gguf_npm_fixture OUT.gguf   (exit 2 on a usage error, 1 when writing fails)
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/gguf.h"

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

int run(const std::string& path) {
  const auto written = tensors();
  Status s = written.ok() ? write_gguf(path, metadata(), *written) : Status(written.error());
  if (!s.ok()) {
    std::fprintf(stderr, "gguf_npm_fixture: %s\n", s.error().message.c_str());
    return 1;
  }
  const auto mapped = GgufModelFile::open(path);
  if (!mapped.ok()) {
    std::fprintf(stderr, "gguf_npm_fixture: %s\n", mapped.error().message.c_str());
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

}  // namespace
}  // namespace ib

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gguf_npm_fixture OUT.gguf\n");
    return 2;
  }
  return ib::run(argv[1]);
}
