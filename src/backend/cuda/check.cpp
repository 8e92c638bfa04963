#include "backend/cuda/detail/check.h"

#include <string>

namespace ib::cuda {

void cuda_fail(cudaError_t err, const char* op, const char* call, const char* file, int line) {
  cudaGetLastError();  // a refused launch also sets the thread's last error: do not leak it
  throw CudaFailure(std::string("CUDA error in op '") + op + "': " + call + " failed with " +
                    cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ") at " + file + ":" +
                    std::to_string(line));
}

void cublas_fail(cublasStatus_t status, const char* op, const char* call, const char* file,
                 int line) {
  throw CudaFailure(std::string("cuBLASLt error in op '") + op + "': " + call + " failed with " +
                    cublasLtGetStatusName(status) + " (" + cublasLtGetStatusString(status) +
                    ") at " + file + ":" + std::to_string(line));
}

}  // namespace ib::cuda
