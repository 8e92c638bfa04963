// GGUF weights (weight_storage.h load_gguf): a GGUF file seen as a SafetensorsCheckpoint under HF
// names, so the safetensors loader's schema check, q/k/v and gate/up fusion and quantization at
// load apply unchanged. Tensors are dequantized to f32 on the host when the file is opened
// (read_gguf_tensor_f32), except, with --quantization gguf, the matmul weights stored in ggml
// block types, which stay in their blocks (ggml_rows; backend/weight.h's kGguf). Llama's
// attn_q / attn_k rows, reordered by llama.cpp's converter for its interleaved RoPE, are put back
// in HF order (hf_row_of_gguf_rope_row), as floats or as rows of blocks.
#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/arch/architecture.h"
#include "engine/detail/weight_storage.h"
#include "model/gguf.h"

namespace ib::detail {
namespace {

struct HostF32Tensor {
  std::vector<int64_t> shape;  // HF's: the GGUF dims reversed, (out, in) for a matrix
  std::vector<float> values;
};

// HF row order of a rope-permuted matrix of `rows` rows stored in GGUF row order, each row
// row_size elements (floats, or bytes of blocks).
template <typename V>
V unpermute_rope_rows(const V& gguf, int64_t rows, int64_t row_size, int64_t head_dim) {
  V hf(gguf.size(), typename V::value_type{});
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t to = hf_row_of_gguf_rope_row(r, head_dim);
    std::copy_n(gguf.begin() + r * row_size, row_size, hf.begin() + to * row_size);
  }
  return hf;
}

class GgufCheckpoint final : public SafetensorsCheckpoint {
 public:
  // raw: HF names kept in their ggml blocks (ggml_rows), not dequantized; their views need file
  // to outlive the checkpoint.
  static Result<std::unique_ptr<GgufCheckpoint>> open(const GgufModelFile& file,
                                                      const ModelConfig& c,
                                                      const std::set<std::string>& raw = {}) {
    const GgufValue* arch = file.file().find("general.architecture");
    if (arch == nullptr || arch->as_string() == nullptr) {
      return user_error(file.path() +
                        ": GGUF metadata 'general.architecture' is missing or not a string");
    }
    auto ckpt = std::unique_ptr<GgufCheckpoint>(new GgufCheckpoint(file.path()));
    for (const GgufTensorInfo& info : file.file().tensors) {
      IB_ASSIGN_OR_RETURN(const GgufTensorMapping m,
                          map_gguf_tensor(info.name, *arch->as_string()));
      std::vector<int64_t> shape(info.dims.rbegin(), info.dims.rend());
      if (m.rope_permuted && (shape.size() != 2 || shape[0] % c.head_dim != 0)) {
        return user_error(fmt::format(
            "{}: GGUF tensor '{}' has shape {}, not whole heads of {} rows; the file does not "
            "match its own metadata",
            file.path(), info.name, shape_string(shape), c.head_dim));
      }
      ++ckpt->type_counts_[std::string(ggml_type_info(info.type).name)];
      if (raw.contains(m.hf_name)) {  // a view of the mapped file, or of its rows in HF order
        GgmlBlockRows rows{info.type, shape, file.tensor_bytes(info)};
        if (m.rope_permuted) {
          rows.bytes = ckpt->permuted_.emplace_back(unpermute_rope_rows(
              std::string(rows.bytes), shape[0], gguf_row_bytes(info.type, shape[1]), c.head_dim));
        }
        ckpt->blocks_.emplace(m.hf_name, std::move(rows));
        continue;
      }
      IB_ASSIGN_OR_RETURN(std::vector<float> values, read_gguf_tensor_f32(file, info.name));
      HostF32Tensor t;
      t.shape = std::move(shape);
      if (m.rope_permuted) {
        values = unpermute_rope_rows(values, t.shape[0], t.shape[1], c.head_dim);
      }
      t.values = std::move(values);
      ckpt->tensors_.emplace(m.hf_name, std::move(t));
    }
    return ckpt;
  }

  bool contains(const std::string& name) const override {
    return tensors_.contains(name) || blocks_.contains(name);
  }
  std::optional<GgmlBlockRows> ggml_rows(const std::string& name) const override {
    const auto it = blocks_.find(name);
    if (it == blocks_.end()) return std::nullopt;
    return it->second;
  }
  Result<HostTensorRef> get(const std::string& name) const override {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) return user_error(path_ + ": no tensor maps to '" + name + "'");
    return HostTensorRef{it->second.values.data(), DType::kF32, it->second.shape};
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [name, tensor] : tensors_) out.push_back(name);
    for (const auto& [name, rows] : blocks_) out.push_back(name);
    return out;
  }
  std::vector<std::string> files() const override { return {path_}; }

  // "12 tensors: 8 Q8_0, 4 F32"
  std::string describe_types() const {
    std::string out = fmt::format("{} tensors:", tensors_.size() + blocks_.size());
    for (const auto& [type, count] : type_counts_) {
      out += fmt::format("{} {} {}", out.back() == ':' ? "" : ",", count, type);
    }
    return out;
  }

 private:
  explicit GgufCheckpoint(std::string path) : path_(std::move(path)) {}
  std::string path_;
  std::map<std::string, HostF32Tensor> tensors_;  // by HF name
  std::map<std::string, GgmlBlockRows> blocks_;   // by HF name, kept in their blocks
  std::deque<std::string> permuted_;  // llama's q/k block rows in HF order (blocks_ views them)
  std::map<std::string, int> type_counts_;  // by ggml type name, as stored
};

}  // namespace

Result<std::vector<std::array<GgufRows, 4>>> gguf_matmul_rows(const ModelConfig& c,
                                                              const std::string& path) {
  IB_ASSIGN_OR_RETURN(const auto file, GgufModelFile::open(path));
  const GgufValue* arch = file->file().find("general.architecture");
  if (arch == nullptr || arch->as_string() == nullptr) {
    return user_error(path + ": GGUF metadata 'general.architecture' is missing or not a string");
  }
  std::map<std::string, GgmlType> types;  // by HF name
  for (const GgufTensorInfo& info : file->file().tensors) {
    IB_ASSIGN_OR_RETURN(const GgufTensorMapping m, map_gguf_tensor(info.name, *arch->as_string()));
    types[m.hf_name] = info.type;
  }
  IB_ASSIGN_OR_RETURN(const Architecture* a, find_architecture(c));
  std::vector<std::array<GgufRows, 4>> out(static_cast<size_t>(c.num_layers));
  for (const SchemaEntry& e : a->weight_schema(c).entries) {
    // (Experts: no GGUF blocks; check_moe_quantization refuses them.)
    if (!is_matmul_role(e.role) || e.expert >= 0 || e.layer < 0) continue;
    GgufRows rows;
    bool blocks = true;
    for (const TensorSource& src : e.sources) {
      const auto it = types.find(src.name);
      // Absent, or a float type: the weight loads dense (load_checkpoint names what is missing).
      if (it == types.end() || !is_gguf_block_type(it->second) || src.shape.size() != 2) {
        blocks = false;
        break;
      }
      rows.cols = src.shape[1];
      if (!rows.append(src.row_offset, it->second)) {
        blocks = false;
        break;
      }
    }
    if (blocks) out[static_cast<size_t>(e.layer)][static_cast<size_t>(matmul_index(e.role))] = rows;
  }
  return out;
}

Result<std::vector<std::array<GgufRows, 4>>> dummy_gguf_rows(const ModelConfig& c) {
  const std::string what = "--quantization gguf with --load-format dummy: model '" + c.name + "'";
  if (c.moe.num_experts > 0 || c.mla.kv_lora_rank > 0) {
    return user_error(what + " is a " + c.family +
                      " model, whose experts or latent attention run dense only; drop "
                      "--quantization gguf");
  }
  const GgufTypeMix mix{GgmlType::kQ4_K, true};
  const int64_t q = int64_t{c.num_heads} * c.head_dim, kv = int64_t{c.num_kv_heads} * c.head_dim;
  const int64_t f = c.intermediate_size, d = c.hidden_size;
  std::vector<std::array<GgufRows, 4>> out(static_cast<size_t>(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    // Each weight's sources: rows and llama.cpp's tensor name.
    const std::vector<std::pair<int64_t, const char*>> sources[4] = {
        {{q, "attn_q.weight"}, {kv, "attn_k.weight"}, {kv, "attn_v.weight"}},
        {{d, "attn_output.weight"}},
        {{f, "ffn_gate.weight"}, {f, "ffn_up.weight"}},
        {{d, "ffn_down.weight"}}};
    const int64_t cols[4] = {d, q, d, f};
    for (int which = 0; which < 4; ++which) {
      GgufRows& rows = out[static_cast<size_t>(l)][static_cast<size_t>(which)];
      rows.cols = cols[which];
      int64_t begin = 0;
      for (const auto& [n, name] : sources[which]) {
        const GgmlType type = mix.type_of(fmt::format("blk.{}.{}", l, name), l, c.num_layers);
        const int64_t block = ggml_type_info(type).block_elems;
        if (rows.cols % block != 0) {
          return user_error(fmt::format(
              "{} has a matmul weight of {} input features, not whole {}-element blocks of {} "
              "(llama.cpp's Q4_K_M mix); pass a GGUF file whose types tile it (Q8_0 and Q4_0 "
              "take multiples of 32) as --model, or drop --quantization gguf",
              what, rows.cols, block, ggml_type_info(type).name));
        }
        rows.append(begin, type);  // at most three sources: never full
        begin += n;
      }
    }
  }
  return out;
}

void quantize_gguf_weight(Backend& backend, ThreadPool& pool, const Tensor& dense,
                          const WeightRef& w) {
  IB_ASSERT(w.format == WeightFormat::kGguf && w.quantized_layout_ok() && dense.rank == 2 &&
                dense.rows() == w.rows() && dense.row_size() == w.cols(),
            "quantize_gguf_weight: dense (N, K) for a kGguf weight (N, K)");
  const int64_t n = w.rows(), k = w.cols(), stride = w.data.dim(1);
  std::vector<float> values(static_cast<size_t>(n * k));
  if (dense.dtype == DType::kF32) {
    backend.copy_to_host(dense, values.data());
  } else {
    std::vector<uint16_t> bits(values.size());
    backend.copy_to_host(dense, bits.data());
    for (size_t i = 0; i < bits.size(); ++i) {
      values[i] =
          dense.dtype == DType::kBF16 ? bf16_bits_to_f32(bits[i]) : f16_bits_to_f32(bits[i]);
    }
  }
  std::vector<uint8_t> blocks(static_cast<size_t>(n * stride), 0);
  pool.parallel_for(n, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const GgmlType type = w.gguf.type[w.gguf.segment_of(r)];
      auto q = quantize_ggml(type,
                             std::span<const float>(values.data() + r * k, static_cast<size_t>(k)));
      IB_ASSERT(q.ok(), "quantize_gguf_weight: dummy values quantize");
      std::copy(q->begin(), q->end(), blocks.begin() + r * stride);
    }
  });
  backend.copy_from_host(w.data, blocks.data(), DType::kU8);
}

Status load_gguf(const ModelConfig& c, const std::string& path, Backend& backend,
                 DenseStaging& staging, ModelWeights& w) {
  IB_ASSIGN_OR_RETURN(const auto file, GgufModelFile::open(path));
  // The matmul weights allocated in their blocks (kGguf) load as stored.
  std::set<std::string> raw;
  IB_ASSIGN_OR_RETURN(const Architecture* a, find_architecture(c));
  for (const SchemaEntry& e : a->weight_schema(c).entries) {
    const WeightRef* matmul = matmul_weight(w, e.role, e.layer, e.expert);
    if (matmul == nullptr || matmul->format != WeightFormat::kGguf) continue;
    for (const TensorSource& src : e.sources) raw.insert(src.name);
  }
  IB_ASSIGN_OR_RETURN(const auto ckpt, GgufCheckpoint::open(*file, c, raw));
  const CheckpointKind kind{"GGUF", "its GGUF metadata",
                            "The GGUF metadata (<arch>.block_count, .embedding_length, ...) must "
                            "describe the file's tensors; the file is damaged or incomplete"};
  IB_TRY(load_checkpoint(c, *ckpt, kind, backend, staging, w));
  w.description =
      raw.empty()
          ? fmt::format("gguf: {} ({}), dequantized to {} at load", path, ckpt->describe_types(),
                        dtype_name(backend.activation_dtype()))
          : fmt::format(
                "gguf: {} ({}), {} matmul tensors in their ggml blocks, the others "
                "dequantized to {} at load",
                path, ckpt->describe_types(), raw.size(), dtype_name(backend.activation_dtype()));
  return Ok{};
}

}  // namespace ib::detail
