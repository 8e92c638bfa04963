// The checking wrapper every CUDA runtime and cuBLASLt call goes through. A failure inside an op
// is not recoverable for the op (ops return void): it throws CudaFailure with the failing op, the
// call, the source line and the CUDA error. The exception never leaves backend/cuda: CudaBackend
// catches it at the op boundary and keeps it as its sticky device_status().
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace ib::cuda {

class CudaFailure : public std::runtime_error {
 public:
  explicit CudaFailure(const std::string& message) : std::runtime_error(message) {}
};

[[noreturn]] void cuda_fail(cudaError_t err, const char* op, const char* call, const char* file,
                            int line);
[[noreturn]] void cublas_fail(cublasStatus_t status, const char* op, const char* call,
                              const char* file, int line);

}  // namespace ib::cuda

// IB_CUDA_CHECK(cudaMemsetAsync(...), "fill_constant")
#define IB_CUDA_CHECK(call, op)                                             \
  do {                                                                      \
    const cudaError_t ib_cuda_err_ = (call);                                \
    if (ib_cuda_err_ != cudaSuccess)                                        \
      ::ib::cuda::cuda_fail(ib_cuda_err_, (op), #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: reports launch-configuration errors under the op's name.
#define IB_CUDA_CHECK_LAUNCH(op) IB_CUDA_CHECK(cudaGetLastError(), (op))

#define IB_CUBLAS_CHECK(call, op)                                              \
  do {                                                                         \
    const cublasStatus_t ib_cublas_st_ = (call);                               \
    if (ib_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                \
      ::ib::cuda::cublas_fail(ib_cublas_st_, (op), #call, __FILE__, __LINE__); \
  } while (0)
