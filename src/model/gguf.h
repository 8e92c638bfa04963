// Front door of GGUF support (llama.cpp's model files): the file format (gguf_file.h), ggml's block
// formats (gguf_blocks.h) and the mapping onto inferbench's config, weights and tokenizer
// (gguf_model.h).
#pragma once

#include "model/gguf_blocks.h"  // IWYU pragma: export
#include "model/gguf_file.h"    // IWYU pragma: export
#include "model/gguf_model.h"   // IWYU pragma: export
