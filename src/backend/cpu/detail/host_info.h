// Host facts for the CPU backend's DeviceInfo: memory from /proc/meminfo, CPU model name.
#pragma once

#include <cstdint>
#include <string>

namespace ib::cpu {

struct HostMemory {
  int64_t total_bytes = 0;
  int64_t available_bytes = 0;  // MemAvailable; 0 when unknown
};

HostMemory read_host_memory();
std::string read_cpu_model_name();

}  // namespace ib::cpu
