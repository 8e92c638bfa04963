// Front door of backend/cuda: creates the CUDA backend (Backend on one device, one stream,
// bf16/fp16/fp32 activations). Only built when INFERBENCH_HAVE_CUDA; the backend factory calls
// it for "cuda" and "cuda:N".
#pragma once

#include <memory>
#include <optional>

#include "backend/backend.h"
#include "core/result.h"

namespace ib {

// Number of CUDA devices visible to this process; 0 when there is no driver or no device.
int cuda_device_count();

// A visible device's name and memory (free_bytes not read: 0), without creating a backend;
// nullopt when index is not a visible device.
std::optional<DeviceInfo> cuda_device_info(int index);

// User errors: no CUDA device, a device index out of range, a malformed "cuda:N".
// Runtime errors: the device cannot be initialised, or its workspaces do not fit.
Result<std::unique_ptr<Backend>> create_cuda_backend(const BackendOptions& options);

// A CUDA backend's device and the stream its ops run on (a tensor-parallel group's NCCL
// communicators enqueue there), or nullopt for a backend create_cuda_backend did not make.
struct CudaQueue {
  int device = 0;
  void* stream = nullptr;  // cudaStream_t
};
std::optional<CudaQueue> cuda_queue_of(const Backend& backend);

}  // namespace ib
