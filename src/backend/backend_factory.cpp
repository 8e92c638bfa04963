// create_backend(): the one place a device name becomes a Backend.
// CUDA hook: under INFERBENCH_HAVE_CUDA the "cuda" branch below calls the CUDA backend's factory
// (src/backend/cuda/, helper 'cuda'); without it, asking for CUDA is a user error.
#include <charconv>
#include <string>
#include <string_view>

#include "backend/backend_factory.h"
#include "backend/cpu/cpu_backend.h"
#if defined(INFERBENCH_HAVE_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace ib {
namespace {

struct DeviceName {
  std::string kind;  // "cpu" or "cuda"
  int index = 0;
};

Result<DeviceName> parse_device(const std::string& device) {
  const auto colon = device.find(':');
  DeviceName name{device.substr(0, colon), 0};
  if (name.kind != "cpu" && name.kind != "cuda") {
    return user_error("unknown device '" + device + "'; use --device cpu, cuda or cuda:N");
  }
  if (colon != std::string::npos) {
    const std::string_view digits = std::string_view(device).substr(colon + 1);
    const auto [end, ec] =
        std::from_chars(digits.data(), digits.data() + digits.size(), name.index);
    if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty() ||
        name.index < 0) {
      return user_error("bad device index in '" + device + "'; use cuda:N with N >= 0");
    }
    if (name.kind == "cpu" && name.index != 0) {
      return user_error("device '" + device +
                        "': the CPU backend has one device; use --device cpu");
    }
  }
  return name;
}

}  // namespace

bool cuda_backend_compiled() {
#if defined(INFERBENCH_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

Result<std::unique_ptr<Backend>> create_backend(const BackendOptions& options) {
  IB_ASSIGN_OR_RETURN(const DeviceName name, parse_device(options.device));
  std::unique_ptr<Backend> backend;
  if (name.kind == "cpu") {
    if (options.dtype != DType::kF32) {
      return user_error("the CPU backend computes in fp32 only (got --dtype " +
                        std::string(dtype_name(options.dtype)) +
                        "); use --dtype fp32 with --device cpu, or a CUDA device for " +
                        std::string(dtype_name(options.dtype)));
    }
    backend = std::make_unique<CpuBackend>(options.num_threads);
  } else {
    if (!cuda_backend_compiled()) {
      return user_error("device '" + options.device +
                        "' needs the CUDA backend, which this build does not include; rebuild with "
                        "nvcc installed (-DINFERBENCH_CUDA=ON) or use --device cpu");
    }
#if defined(INFERBENCH_HAVE_CUDA)
    return create_cuda_backend(options);  // device count, index and dtype checks; memory limit
#endif
  }
  if (options.memory_limit_bytes) backend->memory().set_limit_bytes(options.memory_limit_bytes);
  return backend;
}

}  // namespace ib
