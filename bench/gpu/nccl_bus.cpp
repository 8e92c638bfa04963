// All-reduce bandwidth over the visible GPUs (issue 19), the way nccl-tests' all_reduce_perf
// reports it, through the engine's own path (backend/cuda/nccl_communicator.h: one thread and
// stream a GPU, bf16 sums in place): for each size from 8 KiB to 256 MiB (x4), 5 warm-up calls,
// then `iters` timed calls between CUDA events on each rank's stream; a call's time is rank 0's
// mean. algbw = bytes / time; busbw = algbw x 2 (n - 1) / n (what each GPU's links carry for a
// ring all-reduce: nccl-tests' definition). One JSON object a size on stdout.
// Usage: ib_nccl_bus [ITERS=20] [MAX_GPUS=8]
#include <cuda_runtime.h>

#include <algorithm>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "backend/cuda/nccl_communicator.h"

namespace {

void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "ib_nccl_bus: %s: %s\n", what, cudaGetErrorString(err));
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;  // no driver: no device
  n = std::min(n, argc > 2 ? std::atoi(argv[2]) : 8);
  if (n < 1 || iters < 1) {
    std::fprintf(stderr, "ib_nccl_bus: no CUDA device, or ITERS < 1\n");
    return 2;
  }
  constexpr size_t kMin = 8 << 10, kMax = size_t{256} << 20;
  std::vector<ib::cuda::NcclRank> ranks(static_cast<size_t>(n));
  std::vector<void*> buffers(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    check(cudaSetDevice(r), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&ranks[static_cast<size_t>(r)].stream, cudaStreamNonBlocking),
          "cudaStreamCreate");
    ranks[static_cast<size_t>(r)].device = r;
    check(cudaMalloc(&buffers[static_cast<size_t>(r)], kMax), "cudaMalloc");
    check(cudaMemset(buffers[static_cast<size_t>(r)], 0, kMax), "cudaMemset");
  }
  auto comms = ib::cuda::make_nccl_communicators(ranks);
  if (!comms.ok()) {
    std::fprintf(stderr, "ib_nccl_bus: %s\n", comms.error().message.c_str());
    return 1;
  }
  std::barrier sync(n);
  std::vector<double> ms(static_cast<size_t>(n));
  auto work = [&](int r) {
    ib::Communicator& comm = *(*comms)[static_cast<size_t>(r)];
    comm.attach_thread();
    const cudaStream_t stream = ranks[static_cast<size_t>(r)].stream;
    cudaEvent_t begin, end;
    check(cudaEventCreate(&begin), "cudaEventCreate");
    check(cudaEventCreate(&end), "cudaEventCreate");
    for (size_t bytes = kMin; bytes <= kMax; bytes *= 4) {
      const ib::Tensor t(buffers[static_cast<size_t>(r)], ib::DType::kBF16,
                         {static_cast<int64_t>(bytes / 2)});
      for (int i = 0; i < 5; ++i) (void)comm.all_reduce_sum(t);
      check(cudaStreamSynchronize(stream), "warm-up");
      sync.arrive_and_wait();
      check(cudaEventRecord(begin, stream), "cudaEventRecord");
      for (int i = 0; i < iters; ++i) {
        if (const ib::Status s = comm.all_reduce_sum(t); !s.ok()) {
          std::fprintf(stderr, "ib_nccl_bus: %s\n", s.error().message.c_str());
          std::exit(1);
        }
      }
      check(cudaEventRecord(end, stream), "cudaEventRecord");
      check(cudaEventSynchronize(end), "cudaEventSynchronize");
      float elapsed = 0;
      check(cudaEventElapsedTime(&elapsed, begin, end), "cudaEventElapsedTime");
      ms[static_cast<size_t>(r)] = static_cast<double>(elapsed) / iters;
      sync.arrive_and_wait();
      if (r == 0) {
        const double s = ms[0] / 1e3, algbw = static_cast<double>(bytes) / s / 1e9;
        std::printf(
            "{\"gpus\": %d, \"bytes\": %zu, \"dtype\": \"bf16\", \"iters\": %d, \"us\": %.2f, "
            "\"algbw_gb_s\": %.2f, \"busbw_gb_s\": %.2f}\n",
            n, bytes, iters, ms[0] * 1e3, algbw, algbw * 2.0 * (n - 1) / n);
        std::fflush(stdout);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r) threads.emplace_back(work, r);
  work(0);
  for (std::thread& t : threads) t.join();
  return 0;
}
