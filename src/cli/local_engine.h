// The embedded engine for one-off commands (generate, eval): a backend from --device/--dtype and
// an engine on the model's weights, owned together so the engine goes before its backend.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "engine/engine.h"

namespace ib {

struct LocalEngine {
  std::unique_ptr<Backend> backend;  // declared first: destroyed after the engine
  std::unique_ptr<Engine> engine;
};

// dtype "auto": fp32 on the CPU, bf16 on CUDA. Errors name the flag (--dtype, --load-format).
Result<LocalEngine> open_local_engine(const ModelConfig& model, const std::string& path,
                                      const std::string& device, const std::string& dtype,
                                      const std::string& load_format, uint64_t seed,
                                      const EngineConfig& config);

}  // namespace ib
