// Front door of model/: architecture configs and presets, HF config.json, safetensors
// checkpoints, GGUF files, weights in backend memory, tokenizers.
#pragma once

#include "model/config.h"       // IWYU pragma: export
#include "model/gguf.h"         // IWYU pragma: export
#include "model/hf_config.h"    // IWYU pragma: export
#include "model/presets.h"      // IWYU pragma: export
#include "model/safetensors.h"  // IWYU pragma: export
#include "model/tokenizer.h"    // IWYU pragma: export
