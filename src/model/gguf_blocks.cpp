// A GGUF file's tensors as f32 (gguf_blocks.h).
#include "model/gguf_blocks.h"

#include <fmt/format.h>

namespace ib {

Result<std::vector<float>> read_gguf_tensor_f32(const GgufModelFile& file, std::string_view name) {
  const GgufTensorInfo* t = file.file().find_tensor(name);
  if (t == nullptr) {
    return user_error(fmt::format("{}: no tensor '{}' in this GGUF file", file.path(), name));
  }
  std::vector<float> out(static_cast<size_t>(t->numel()));
  IB_TRY(dequantize_ggml(t->type, file.tensor_bytes(*t), out));
  return out;
}

}  // namespace ib
