// GGUF weights (weight_storage.h load_gguf): a GGUF file seen as a SafetensorsCheckpoint under HF
// names, so the safetensors loader's schema check, q/k/v and gate/up fusion and quantization at
// load apply unchanged. Every tensor is dequantized to f32 on the host when the file is opened
// (read_gguf_tensor_f32), so the host holds the whole model in f32 while it loads. Llama's
// attn_q / attn_k rows, reordered by llama.cpp's converter for its interleaved RoPE, are put back
// in HF order (hf_row_of_gguf_rope_row).
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/detail/weight_storage.h"
#include "model/gguf.h"

namespace ib::detail {
namespace {

struct HostF32Tensor {
  std::vector<int64_t> shape;  // HF's: the GGUF dims reversed, (out, in) for a matrix
  std::vector<float> values;
};

// HF row order of a rope-permuted (rows, cols) matrix stored in GGUF row order.
std::vector<float> unpermute_rope_rows(const std::vector<float>& gguf, int64_t rows, int64_t cols,
                                       int64_t head_dim) {
  std::vector<float> hf(gguf.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t to = hf_row_of_gguf_rope_row(r, head_dim);
    std::copy_n(gguf.begin() + r * cols, cols, hf.begin() + to * cols);
  }
  return hf;
}

class GgufCheckpoint final : public SafetensorsCheckpoint {
 public:
  static Result<std::unique_ptr<GgufCheckpoint>> open(const GgufModelFile& file,
                                                      const ModelConfig& c) {
    const GgufValue* arch = file.file().find("general.architecture");
    if (arch == nullptr || arch->as_string() == nullptr) {
      return user_error(file.path() +
                        ": GGUF metadata 'general.architecture' is missing or not a string");
    }
    auto ckpt = std::unique_ptr<GgufCheckpoint>(new GgufCheckpoint(file.path()));
    for (const GgufTensorInfo& info : file.file().tensors) {
      IB_ASSIGN_OR_RETURN(const GgufTensorMapping m,
                          map_gguf_tensor(info.name, *arch->as_string()));
      IB_ASSIGN_OR_RETURN(std::vector<float> values, read_gguf_tensor_f32(file, info.name));
      HostF32Tensor t;
      t.shape.assign(info.dims.rbegin(), info.dims.rend());
      if (m.rope_permuted) {
        if (t.shape.size() != 2 || t.shape[0] % c.head_dim != 0) {
          return user_error(fmt::format(
              "{}: GGUF tensor '{}' has shape {}, not whole heads of {} rows; the file does not "
              "match its own metadata",
              file.path(), info.name, shape_string(t.shape), c.head_dim));
        }
        values = unpermute_rope_rows(values, t.shape[0], t.shape[1], c.head_dim);
      }
      t.values = std::move(values);
      ++ckpt->type_counts_[std::string(ggml_type_info(info.type).name)];
      ckpt->tensors_.emplace(m.hf_name, std::move(t));
    }
    return ckpt;
  }

  bool contains(const std::string& name) const override { return tensors_.contains(name); }
  Result<HostTensorRef> get(const std::string& name) const override {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) return user_error(path_ + ": no tensor maps to '" + name + "'");
    return HostTensorRef{it->second.values.data(), DType::kF32, it->second.shape};
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [name, tensor] : tensors_) out.push_back(name);
    return out;
  }
  std::vector<std::string> files() const override { return {path_}; }

  // "12 tensors: 8 Q8_0, 4 F32"
  std::string describe_types() const {
    std::string out = fmt::format("{} tensors:", tensors_.size());
    for (const auto& [type, count] : type_counts_) {
      out += fmt::format("{} {} {}", out.back() == ':' ? "" : ",", count, type);
    }
    return out;
  }

 private:
  explicit GgufCheckpoint(std::string path) : path_(std::move(path)) {}
  std::string path_;
  std::map<std::string, HostF32Tensor> tensors_;  // by HF name
  std::map<std::string, int> type_counts_;        // by ggml type name, as stored
};

}  // namespace

Status load_gguf(const ModelConfig& c, const std::string& path, Backend& backend,
                 DenseStaging& staging, ModelWeights& w) {
  IB_ASSIGN_OR_RETURN(const auto file, GgufModelFile::open(path));
  IB_ASSIGN_OR_RETURN(const auto ckpt, GgufCheckpoint::open(*file, c));
  const CheckpointKind kind{"GGUF", "its GGUF metadata",
                            "The GGUF metadata (<arch>.block_count, .embedding_length, ...) must "
                            "describe the file's tensors; the file is damaged or incomplete"};
  IB_TRY(load_checkpoint(c, *ckpt, kind, backend, staging, w));
  w.description = fmt::format("gguf: {} ({}), dequantized to {} at load", path,
                              ckpt->describe_types(), dtype_name(backend.activation_dtype()));
  return Ok{};
}

}  // namespace ib::detail
