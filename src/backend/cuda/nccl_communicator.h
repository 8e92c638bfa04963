// The NCCL communicator (issue 19): the ranks of a tensor-parallel group as the GPUs of one
// process, one thread a GPU, NCCL's collectives enqueued on each rank's stream (so that a CUDA
// graph of the decode step captures them). Built where NCCL is found (INFERBENCH_HAVE_NCCL).
// NVLink multicast stays off (NCCL_NVLS_ENABLE=0 unless the environment sets it), as the GPU
// machine's notes require.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/communicator.h"

namespace ib::cuda {

// One rank: its device and the stream its ops run on (CudaBackend::stream()).
struct NcclRank {
  int device = 0;
  cudaStream_t stream = nullptr;
};

// One communicator per rank, in rank order (ncclCommInitAll over the ranks' devices, called from
// this thread), or a runtime error naming NCCL's. Each rank's collectives must then be called
// from its own thread (NCCL waits for every rank), with device tensors on that rank's device;
// all_gather_columns uses a scratch of (size x rows x cols) that it allocates outside any graph
// capture (the first, eager step's size), so a captured step must not gather more rows.
Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(
    const std::vector<NcclRank>& ranks);

// "2.28.9": the NCCL the process runs, for result.json.
std::string nccl_version();

}  // namespace ib::cuda
