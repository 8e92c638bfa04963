// create_backend(): the one place a device name becomes a Backend. Its own library
// (ib_backend_factory) above ib_backend and ib_backend_cuda, so that neither links the other.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace ib {

// Creates the backend named by options.device; user errors for an unknown device, a CUDA
// device in a build without CUDA, a bad index, or a dtype the backend cannot run.
Result<std::unique_ptr<Backend>> create_backend(const BackendOptions& options);
// Whether this build has the CUDA backend.
bool cuda_backend_compiled();

}  // namespace ib
