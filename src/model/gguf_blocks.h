// A GGUF file's tensors as f32 (part of the gguf.h front door); ggml's block formats themselves are
// core/ggml_blocks.h.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/ggml_blocks.h"  // IWYU pragma: export
#include "core/result.h"
#include "model/gguf_file.h"

namespace ib {

// The named tensor of a mapped file, dequantized to f32 (numel elements, ne[0] fastest). User
// error naming the tensor and the file when it is absent.
Result<std::vector<float>> read_gguf_tensor_f32(const GgufModelFile& file, std::string_view name);

}  // namespace ib
