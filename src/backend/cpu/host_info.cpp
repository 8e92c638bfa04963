// Host memory and CPU name, read from /proc (Linux); zeros and "unknown" elsewhere.
#include <fstream>
#include <sstream>
#include <string>

#include "backend/cpu/detail/host_info.h"

namespace ib::cpu {

HostMemory read_host_memory() {
  HostMemory mem;
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    fields >> key >> kib;
    if (key == "MemTotal:") mem.total_bytes = kib * 1024;
    if (key == "MemAvailable:") mem.available_bytes = kib * 1024;
  }
  return mem;
}

std::string read_cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

}  // namespace ib::cpu
