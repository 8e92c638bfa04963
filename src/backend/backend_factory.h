// create_backend(): the one place a device name becomes a Backend. Its own library
// (ib_backend_factory) above ib_backend and ib_backend_cuda, so that neither links the other.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/communicator.h"

namespace ib {

// Creates the backend named by options.device; user errors for an unknown device, a CUDA
// device in a build without CUDA, a bad index, or a dtype the backend cannot run.
Result<std::unique_ptr<Backend>> create_backend(const BackendOptions& options);
// Whether this build has the CUDA backend.
bool cuda_backend_compiled();
// Whether this build has NCCL (tensor parallelism over GPUs).
bool nccl_compiled();

// The GPU `device` names ("cuda" or "cuda:N"): its name and memory (cuda_device_info), before
// any backend exists; nullopt for the CPU, a bad name, a build without CUDA or a device that is
// not visible (the backend's creation reports those).
std::optional<DeviceInfo> gpu_device_info(const std::string& device);

// Tensor parallelism (issue 19), before anything loads: whether `size` ranks can run on `device`.
// The CPU runs its ranks as threads (any size); CUDA runs one GPU a rank, cuda:k .. cuda:k+size-1,
// over NCCL. User errors: a bad device name, fewer GPUs visible than ranks, a build without NCCL.
Status check_rank_devices(const std::string& device, int size);

// A tensor-parallel group whose rank 0 is `first` (a backend create_backend made): the other
// ranks' backends, each of first's kind, dtype and memory limit on a device of its own (the CPU:
// first's threads; CUDA: the GPUs after first's), and one communicator a rank (CPU threads over
// shared memory; NCCL, NVLink multicast off). Errors as check_rank_devices, and NCCL's.
struct RankGroup {
  std::vector<std::unique_ptr<Backend>> backends;    // ranks 1 .. size - 1
  std::vector<std::unique_ptr<Communicator>> comms;  // ranks 0 .. size - 1
};
Result<RankGroup> create_rank_group(Backend& first, int size);

}  // namespace ib
