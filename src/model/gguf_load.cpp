// A GGUF file as --model (gguf_model.h): its config and tokenizer, read once the whole file is
// known to be one the engine runs.
#include <memory>
#include <string>

#include "model/gguf_model.h"

namespace ib {
namespace {

bool has_tokenizer(const GgufFile& file) {
  return file.find("tokenizer.ggml.model") != nullptr;
}

}  // namespace

bool names_gguf_file(const std::string& model) {
  return model.ends_with(".gguf") || is_gguf_file(model);
}

Result<ModelConfig> load_gguf_config(const std::string& path) {
  IB_ASSIGN_OR_RETURN(const auto mapped, GgufModelFile::open(path));
  const GgufFile& file = mapped->file();
  IB_ASSIGN_OR_RETURN(ModelConfig config, gguf_model_config(file, path));
  for (const GgufTensorInfo& tensor : file.tensors) {
    if (const auto m = map_gguf_tensor(tensor.name, config.family); !m.ok()) {
      return user_error(path + ": " + m.error().message);
    }
  }
  if (has_tokenizer(file)) IB_TRY(gguf_tokenizer(file, path));
  return config;
}

bool gguf_has_tokenizer(const std::string& path) {
  const auto mapped = GgufModelFile::open(path);
  return mapped.ok() && has_tokenizer((*mapped)->file());
}

Result<std::unique_ptr<Tokenizer>> load_gguf_tokenizer(const std::string& path) {
  IB_ASSIGN_OR_RETURN(const auto mapped, GgufModelFile::open(path));
  if (!has_tokenizer(mapped->file())) return make_byte_tokenizer();
  return gguf_tokenizer(mapped->file(), path);
}

}  // namespace ib
