#include "backend/cuda/detail/check.h"

#include <cstdio>
#include <cstdlib>

namespace ib::cuda {

void cuda_fail(cudaError_t err, const char* op, const char* call, const char* file, int line) {
  std::fprintf(stderr, "inferbench: CUDA error in op '%s': %s failed with %s (%s) at %s:%d\n", op,
               call, cudaGetErrorName(err), cudaGetErrorString(err), file, line);
  std::fflush(stderr);
  std::abort();
}

void cublas_fail(cublasStatus_t status, const char* op, const char* call, const char* file,
                 int line) {
  std::fprintf(stderr, "inferbench: cuBLASLt error in op '%s': %s failed with %s (%s) at %s:%d\n",
               op, call, cublasLtGetStatusName(status), cublasLtGetStatusString(status), file,
               line);
  std::fflush(stderr);
  std::abort();
}

}  // namespace ib::cuda
