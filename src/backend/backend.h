// Backend: the front door of backend/ — a Device (device.h: memory through one tracked
// allocator, transfers, graphs, timing) with the op sets a forward pass needs (ops.h: DenseOps,
// AttentionOps, QuantOps, and the optional FusedDecodeOps, MoeOps, LoraOps and VisionOps). The CPU
// backend (cpu/) is the reference every other backend is tested against.
//
// Contract: ops are enqueued in call order on the device's single stream (the CPU backend runs
// them synchronously); results are visible on the host only after synchronize() or
// copy_to_host(). One thread drives a backend at a time (the engine's thread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "backend/device.h"
#include "backend/ops.h"
#include "backend/weight.h"

namespace ib {

class Backend : public Device, public DenseOps, public AttentionOps, public QuantOps {
 public:
  // The activation and dense weight dtype the ops compute in.
  virtual DType activation_dtype() const = 0;
  // The weight formats its matmul ops read and quantize_weight writes (dense only by default).
  virtual bool supports_weight_format(WeightFormat format) const {
    return format == WeightFormat::kDense;
  }
  // The fused decode ops, or nullptr where the backend has none (the CPU).
  virtual FusedDecodeOps* fused_decode_ops() { return nullptr; }
  // The mixture-of-experts ops (the CPU's and CUDA's), or nullptr where a backend has none.
  virtual MoeOps* moe_ops() { return nullptr; }
  // Multi-head latent attention (DeepSeek-V2); null on a backend without it.
  virtual MlaOps* mla_ops() { return nullptr; }
  // The LoRA ops (the CPU's and CUDA's), or nullptr where a backend has none.
  virtual LoraOps* lora_ops() { return nullptr; }
  // A vision encoder's ops (the CPU's), or nullptr where the backend has none yet (CUDA).
  virtual VisionOps* vision_ops() { return nullptr; }
  // Calibration: observer (null to stop) is called with every matmul's input x and weight before
  // the matmul computes. False where the backend cannot (the CPU and CUDA backends can).
  using MatmulObserver = std::function<void(const Tensor& x, const WeightRef& w)>;
  virtual bool set_matmul_observer(MatmulObserver /*observer*/) { return false; }
};

// Options for creating a backend from the command line (backend_factory.h).
struct BackendOptions {
  std::string device = "cpu";  // "cpu", "cuda", "cuda:N"
  DType dtype = DType::kF32;   // model/activation dtype (CPU: fp32 only)
  int num_threads = 0;         // CPU: 0 = all hardware threads
  std::optional<int64_t> memory_limit_bytes;
};

}  // namespace ib
