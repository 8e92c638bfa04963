// CudaBackend's optional parts: CUDA graph capture and replay (memory of each instantiation
// measured with cudaMemGetInfo and tracked under MemoryTag::kGraph), the step timer (two events
// on the stream) and the start-up copy-ceiling measurement.
#include <algorithm>
#include <vector>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/cuda_backend_impl.h"
#include "backend/cuda/detail/kernels.h"

namespace ib::cuda {

// An instantiated graph; replays on its backend's stream. Freed (and untracked) on destruction.
class CudaGraph final : public DeviceGraph {
 public:
  CudaGraph(CudaBackend& backend, cudaGraphExec_t exec, int64_t bytes)
      : backend_(backend), exec_(exec), bytes_(bytes) {
    backend_.memory().on_alloc(reinterpret_cast<uint64_t>(exec_), bytes_, MemoryTag::kGraph);
  }
  ~CudaGraph() override {
    cudaGraphExecDestroy(exec_);
    backend_.memory().on_free(reinterpret_cast<uint64_t>(exec_), bytes_, MemoryTag::kGraph);
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void replay() override {
    backend_.reset_lora_chains();  // the host no longer knows what the accumulators hold
    backend_.run_op("graph replay", [&] {
      IB_CUDA_CHECK(cudaGraphLaunch(exec_, backend_.stream_), "graph replay");
    });
  }
  int64_t bytes() const override { return bytes_; }

 private:
  CudaBackend& backend_;
  cudaGraphExec_t exec_;
  int64_t bytes_;
};

Status CudaBackend::begin_capture() {
  IB_TRY(device_status());
  if (capturing_) return runtime_error("begin_capture: a capture is already in progress");
  run_op("begin_capture", [&] {
    // Thread-local mode: other threads (telemetry) may still call the CUDA runtime meanwhile.
    IB_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                  "begin_capture");
  });
  IB_TRY(device_status());
  capturing_ = true;
  gemm_->set_capturing(true);  // no prewarm launches inside the graph
  reset_lora_chains();         // the graph must zero the chained shrinks' accumulators it uses
  return Ok{};
}

Result<std::unique_ptr<DeviceGraph>> CudaBackend::end_capture() {
  if (!capturing_) return runtime_error("end_capture without begin_capture");
  capturing_ = false;
  gemm_->set_capturing(false);
  reset_lora_chains();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  int64_t bytes = 0;
  run_op("end_capture", [&] {
    IB_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph), "end_capture");
    size_t free_before = 0, free_after = 0, total = 0;
    IB_CUDA_CHECK(cudaMemGetInfo(&free_before, &total), "end_capture");
    IB_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0), "graph instantiate");
    IB_CUDA_CHECK(cudaGraphUpload(exec, stream_), "graph upload");
    IB_CUDA_CHECK(cudaStreamSynchronize(stream_), "graph upload");
    IB_CUDA_CHECK(cudaMemGetInfo(&free_after, &total), "end_capture");
    bytes = free_before > free_after ? static_cast<int64_t>(free_before - free_after) : 0;
  });
  if (graph) cudaGraphDestroy(graph);
  if (Status st = device_status(); !st.ok()) {
    if (exec) cudaGraphExecDestroy(exec);
    return st.error();
  }
  return std::unique_ptr<DeviceGraph>(new CudaGraph(*this, exec, bytes));
}

void CudaBackend::timer_start() {
  timer_recorded_ = false;
  run_op("timer", [&] { IB_CUDA_CHECK(cudaEventRecord(timer_begin_, stream_), "timer"); });
}

void CudaBackend::timer_stop() {
  run_op("timer", [&] {
    IB_CUDA_CHECK(cudaEventRecord(timer_end_, stream_), "timer");
    timer_recorded_ = true;
  });
}

std::optional<int64_t> CudaBackend::timer_elapsed_ns() {
  if (!timer_recorded_ || !error_.empty()) return std::nullopt;
  if (cudaEventQuery(timer_end_) != cudaSuccess) {
    cudaGetLastError();  // not reached yet (cudaErrorNotReady is not sticky)
    return std::nullopt;
  }
  float ms = 0.0f;
  if (cudaEventElapsedTime(&ms, timer_begin_, timer_end_) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  return static_cast<int64_t>(static_cast<double>(ms) * 1e6);
}

Status CudaBackend::measure_copy_ceiling() {
  // 256 MiB each way: over 4x the H200's L2, so the copy streams from HBM. Best of 20 after 3
  // warm-ups (the clocks ramp up within them): about 3 ms on an H200.
  constexpr size_t kBytes = size_t{256} << 20;
  constexpr int kWarmups = 3, kReps = 20;
  IB_ASSIGN_OR_RETURN(Buffer src, alloc(kBytes, MemoryTag::kWorkspace));
  IB_ASSIGN_OR_RETURN(Buffer dst, alloc(kBytes, MemoryTag::kWorkspace));
  std::vector<float> times_ms;
  run_op("copy ceiling", [&] {
    IB_CUDA_CHECK(cudaMemsetAsync(src.data(), 0x5a, kBytes, stream_), "copy ceiling");
    for (int i = 0; i < kWarmups; ++i)
      launch_copy16(src.data(), dst.data(), kBytes, num_sms_, stream_);
    for (int i = 0; i < kReps; ++i) {
      IB_CUDA_CHECK(cudaEventRecord(timer_begin_, stream_), "copy ceiling");
      launch_copy16(src.data(), dst.data(), kBytes, num_sms_, stream_);
      IB_CUDA_CHECK(cudaEventRecord(timer_end_, stream_), "copy ceiling");
      IB_CUDA_CHECK(cudaEventSynchronize(timer_end_), "copy ceiling");
      float ms = 0.0f;
      IB_CUDA_CHECK(cudaEventElapsedTime(&ms, timer_begin_, timer_end_), "copy ceiling");
      times_ms.push_back(ms);
    }
  });
  IB_TRY(device_status());
  const float best_ms = *std::min_element(times_ms.begin(), times_ms.end());
  copy_ceiling_bytes_per_s_ = 2.0 * static_cast<double>(kBytes) / (double{best_ms} * 1e-3);
  return Ok{};
}

}  // namespace ib::cuda
