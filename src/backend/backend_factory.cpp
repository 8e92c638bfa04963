// create_backend(): the one place a device name becomes a Backend.
// CUDA hook: under INFERBENCH_HAVE_CUDA the "cuda" branch below calls the CUDA backend's factory
// (src/backend/cuda/, helper 'cuda'); without it, asking for CUDA is a user error.
#include <charconv>
#include <string>
#include <string_view>

#include "backend/backend_factory.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_communicator.h"
#if defined(INFERBENCH_HAVE_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif
#if defined(INFERBENCH_HAVE_NCCL)
#include "backend/cuda/nccl_communicator.h"
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

std::optional<DeviceInfo> gpu_device_info(const std::string& device) {
  const Result<DeviceName> name = parse_device(device);
  if (!name.ok() || name->kind != "cuda") return std::nullopt;
#if defined(INFERBENCH_HAVE_CUDA)
  return cuda_device_info(name->index);
#else
  return std::nullopt;
#endif
}

bool nccl_compiled() {
#if defined(INFERBENCH_HAVE_NCCL)
  return true;
#else
  return false;
#endif
}

Status check_rank_devices(const std::string& device, int size) {
  IB_ASSIGN_OR_RETURN(const DeviceName name, parse_device(device));
  if (name.kind == "cpu" || size <= 1) return Ok{};
  const std::string flag =
      "--tensor-parallel-size " + std::to_string(size) + " on --device " + device;
  if (!cuda_backend_compiled())
    return user_error(flag +
                      " needs the CUDA backend, which this build does not include; "
                      "rebuild with nvcc installed (-DINFERBENCH_CUDA=ON) or use --device cpu");
  if (!nccl_compiled())
    return user_error(flag +
                      " needs NCCL, which this build does not include; install NCCL "
                      "(Debian's libnccl-dev, or the CUDA toolkit's) and rebuild, or use "
                      "--tensor-parallel-size 1");
  int visible = 0;
#if defined(INFERBENCH_HAVE_CUDA)
  visible = cuda_device_count();
#endif
  const int last = name.index + size - 1;
  if (last >= visible)
    return user_error(flag + " needs " + std::to_string(size) + " GPUs, one a rank (cuda:" +
                      std::to_string(name.index) + " .. cuda:" + std::to_string(last) + "); " +
                      std::to_string(visible) + (visible == 1 ? " is" : " are") +
                      " visible (CUDA_VISIBLE_DEVICES selects them), or use a smaller "
                      "--tensor-parallel-size");
  return Ok{};
}

Result<RankGroup> create_rank_group(Backend& first, int size) {
  IB_ASSERT(size >= 1, "create_rank_group: a group of at least one rank");
  RankGroup group;
  if (auto* cpu = dynamic_cast<CpuBackend*>(&first)) {
    for (int r = 1; r < size; ++r) {
      auto rank = std::make_unique<CpuBackend>(cpu->num_threads());
      if (cpu->fused_decode_reference_enabled()) rank->enable_fused_decode_reference();
      rank->memory().set_limit_bytes(first.memory().limit_bytes());
      group.backends.push_back(std::move(rank));
    }
    group.comms = make_cpu_communicators(size);
    return group;
  }
#if defined(INFERBENCH_HAVE_CUDA)
  const std::optional<CudaQueue> queue0 = cuda_queue_of(first);
  IB_ASSERT(queue0.has_value(), "create_rank_group: a backend neither CPU nor CUDA");
  IB_TRY(check_rank_devices("cuda:" + std::to_string(queue0->device), size));
#if defined(INFERBENCH_HAVE_NCCL)
  for (int r = 1; r < size; ++r) {
    BackendOptions options;
    options.device = "cuda:" + std::to_string(queue0->device + r);
    options.dtype = first.activation_dtype();
    options.memory_limit_bytes = first.memory().limit_bytes();
    IB_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, create_cuda_backend(options));
    group.backends.push_back(std::move(backend));
  }
  std::vector<cuda::NcclRank> ranks{{queue0->device, static_cast<cudaStream_t>(queue0->stream)}};
  for (const auto& b : group.backends) {
    const CudaQueue q = cuda_queue_of(*b).value();
    ranks.push_back({q.device, static_cast<cudaStream_t>(q.stream)});
  }
  IB_ASSIGN_OR_RETURN(group.comms, cuda::make_nccl_communicators(ranks));
  return group;
#endif
#endif
  return user_error("tensor parallelism: this build cannot group ranks on " +
                    first.device_info().kind);
}

}  // namespace ib
