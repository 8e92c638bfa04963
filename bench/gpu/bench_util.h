// Timing for the GPU op benchmarks: `inner` calls of an op captured in one CUDA graph (so launch
// gaps do not count), replayed after a warm-up, timed with CUDA events; the median of the
// repeats per call. Results are rows of a table and of a JSON array.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/detail/check.h"

namespace ib::bench {

inline constexpr double kCopyCeilingTBs = 4.16;    // measured device-to-device copy, H200
inline constexpr double kGemmCeilingTflops = 761;  // measured bf16 GEMM 8192^3, H200

class GraphTimer {
 public:
  explicit GraphTimer(cudaStream_t stream) : stream_(stream) {
    IB_CUDA_CHECK(cudaEventCreate(&start_), "bench");
    IB_CUDA_CHECK(cudaEventCreate(&stop_), "bench");
  }
  ~GraphTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  // Median device milliseconds per call of fn(i), i = 0..inner-1 inside one graph.
  double per_call_ms(const std::function<void(int)>& fn, int inner, int reps = 15) {
    fn(0);  // eager warm-up: plans, attributes, module load
    IB_CUDA_CHECK(cudaStreamSynchronize(stream_), "bench warm-up");
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    IB_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "bench capture");
    for (int i = 0; i < inner; ++i) fn(i);
    IB_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph), "bench capture");
    IB_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0), "bench capture");
    IB_CUDA_CHECK(cudaGraphLaunch(exec, stream_), "bench replay");
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
      IB_CUDA_CHECK(cudaEventRecord(start_, stream_), "bench replay");
      IB_CUDA_CHECK(cudaGraphLaunch(exec, stream_), "bench replay");
      IB_CUDA_CHECK(cudaEventRecord(stop_, stream_), "bench replay");
      IB_CUDA_CHECK(cudaEventSynchronize(stop_), "bench replay");
      float t = 0;
      IB_CUDA_CHECK(cudaEventElapsedTime(&t, start_, stop_), "bench replay");
      ms.push_back(static_cast<double>(t) / inner);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// One measured row: time plus the bytes and FLOPs the op must move / do.
struct Row {
  std::string group, op, shape, path;
  double us = 0;
  double bytes = 0;
  double flops = 0;
};

class Report {
 public:
  void add(Row row) {
    const double gbs = row.bytes / (row.us * 1e3);
    const double tflops = row.flops / (row.us * 1e6);
    std::printf("%-9s %-16s %-26s %-9s %10.2f us %8.0f GB/s %5.1f%% %7.1f TFLOP/s %5.1f%%\n",
                row.group.c_str(), row.op.c_str(), row.shape.c_str(), row.path.c_str(), row.us, gbs,
                100.0 * gbs / (kCopyCeilingTBs * 1e3), tflops, 100.0 * tflops / kGemmCeilingTflops);
    std::fflush(stdout);
    rows_.push_back({{"group", row.group},
                     {"op", row.op},
                     {"shape", row.shape},
                     {"path", row.path},
                     {"time_us", row.us},
                     {"bytes", row.bytes},
                     {"flops", row.flops},
                     {"achieved_gb_per_s", gbs},
                     {"copy_ceiling_fraction", gbs / (kCopyCeilingTBs * 1e3)},
                     {"achieved_tflop_per_s", tflops},
                     {"gemm_ceiling_fraction", tflops / kGemmCeilingTflops}});
  }
  nlohmann::json& extra() { return extra_; }
  nlohmann::json json() const {
    return {{"ceilings",
             {{"copy_tb_per_s", kCopyCeilingTBs}, {"gemm_tflop_per_s", kGemmCeilingTflops}}},
            {"rows", rows_},
            {"summary", extra_}};
  }

 private:
  nlohmann::json rows_ = nlohmann::json::array();
  nlohmann::json extra_ = nlohmann::json::object();
};

}  // namespace ib::bench
