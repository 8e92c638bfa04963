// NVML loaded at run time with dlopen (default "libnvidia-ml.so.1"): no link dependency, and a
// machine without the driver simply has no GPU information. The types and entry points used
// are declared here from NVIDIA's public API documentation (the header is not a Debian package).
//
// ABI notes: nvmlMemory_v2_t carries a version word, sizeof(struct) | (2 << 24); the
// per-process list comes from the newest nvmlDeviceGetComputeRunningProcesses_* the library
// exports, with the record stride probed (24 bytes; 32 on the drivers that briefly widened _v3;
// 16 for the unversioned call). Values NVML cannot give are NaN, never zero.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ib::detail {

struct NvmlDevice {
  int index = 0;
  std::string name;
  std::string uuid;
  int64_t memory_total_bytes = 0;
  int64_t memory_used_bytes = 0;  // v1 "used" (includes reserved memory)
};

// How two GPUs connect, as `nvidia-smi topo -m` names it: their PCIe paths' common ancestor
// (nvmlDeviceGetTopologyCommonAncestor: "PIX" one PCIe switch, "PXB" several, "PHB" a host
// bridge, "NODE" a NUMA node, "SYS" across NUMA nodes; "" where NVML cannot tell) and whether
// they reach each other over NVLink (nvmlDeviceGetP2PStatus for NVLink; nullopt where unknown).
struct NvmlLink {
  int a = 0, b = 0;  // device indices, a < b
  std::string pcie;
  std::optional<bool> nvlink;
};

struct NvmlSnapshot {
  std::string driver_version;
  int cuda_driver_version = 0;  // e.g. 13000 for CUDA 13.0
  std::vector<NvmlDevice> devices;
  std::vector<NvmlLink> links;  // every pair of devices
};

// nullopt when the library is missing, nvmlInit fails or no device is visible.
std::optional<NvmlSnapshot> query_nvml(const char* library = "libnvidia-ml.so.1");

// One reading of one GPU; NaN where the call is missing or unsupported.
struct NvmlReading {
  double used_bytes;          // v2: allocated, excluding reserved
  double reserved_bytes;      // v2: driver/firmware reservation
  double free_bytes;          // v2
  double total_bytes;         // v2 (v1 when v2 is missing)
  double v1_used_bytes;       // v1: includes the reservation
  double process_used_bytes;  // this process, where NVML can see it (not in most containers)
  double power_w;             // board power (a 1 s average on Ampere and newer)
  double energy_j;            // the total-energy counter since the driver loaded
  double sm_clock_mhz;
  double mem_clock_mhz;
  double util_gpu_pct;     // share of time a kernel ran
  double util_memory_pct;  // share of time memory was read or written (bandwidth, not capacity)
  double temperature_c;
};

class NvmlApi {
 public:
  // Loads library, resolves the entry points and initialises NVML. nullopt with *why set when
  // the library is missing, lacks nvmlInit, or initialisation fails.
  static std::unique_ptr<NvmlApi> open(const std::string& library, std::string* why);
  ~NvmlApi();
  NvmlApi(const NvmlApi&) = delete;
  NvmlApi& operator=(const NvmlApi&) = delete;

  int device_count() const { return static_cast<int>(devices_.size()); }
  const std::string& device_name(int i) const { return names_[static_cast<size_t>(i)]; }
  // with_processes: also walk the process list (the slowest call; poll it less often).
  NvmlReading read(int device, bool with_processes) const;
  // Which symbols and struct versions were resolved, for result.json.
  nlohmann::json describe() const;

  struct Functions;

 private:
  NvmlApi() = default;
  void* handle_ = nullptr;
  std::unique_ptr<Functions> fn_;
  std::vector<void*> devices_;
  std::vector<std::string> names_;
  int process_stride_bytes_ = 0;
  std::string process_symbol_;
};

}  // namespace ib::detail
