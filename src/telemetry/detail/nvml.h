// NVML loaded at run time with dlopen("libnvidia-ml.so.1"): no link dependency, and a machine
// without the driver simply has no GPU information. Only the calls the environment fingerprint
// needs; the GPU telemetry issue extends this (memory v2, power, energy).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ib::detail {

struct NvmlDevice {
  int index = 0;
  std::string name;
  std::string uuid;
  int64_t memory_total_bytes = 0;
  int64_t memory_used_bytes = 0;  // v1 "used" (includes reserved memory)
};

struct NvmlSnapshot {
  std::string driver_version;
  int cuda_driver_version = 0;  // e.g. 13000 for CUDA 13.0
  std::vector<NvmlDevice> devices;
};

// nullopt when the library is missing, nvmlInit fails or no device is visible.
std::optional<NvmlSnapshot> query_nvml(const char* library = "libnvidia-ml.so.1");

}  // namespace ib::detail
