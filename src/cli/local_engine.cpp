#include "cli/local_engine.h"

#include <fmt/format.h>

#include "backend/backend_factory.h"
#include "cli/run_options.h"

namespace ib {

Result<LocalEngine> open_local_engine(const ModelConfig& model, const std::string& path,
                                      const std::string& device, const std::string& dtype,
                                      const std::string& load_format, uint64_t seed,
                                      const EngineConfig& config) {
  BackendOptions bo;
  bo.device = device;
  if (dtype == "auto") {
    bo.dtype = device == "cpu" ? DType::kF32 : DType::kBF16;
  } else if (const auto dt = parse_float_dtype(dtype)) {
    bo.dtype = *dt;
  } else {
    return user_error(fmt::format("--dtype {}: use auto, fp32, bf16 or fp16", dtype));
  }
  WeightOptions wo;
  IB_ASSIGN_OR_RETURN(wo.format, parse_load_format(load_format));
  wo.path = path;
  wo.seed = seed;
  LocalEngine e;
  IB_ASSIGN_OR_RETURN(e.backend, create_backend(bo));
  IB_ASSIGN_OR_RETURN(e.engine, create_engine(model, wo, config, *e.backend));
  return e;
}

}  // namespace ib
