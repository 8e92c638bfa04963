#include "telemetry/detail/nvml.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstring>
#include <limits>

#include <fmt/format.h>

namespace ib::detail {
namespace {

// The subset of the NVML API used here, declared from the public documentation.
using NvmlReturn = int;
using NvmlDeviceHandle = struct NvmlDeviceOpaque*;
struct NvmlMemoryV1 {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct NvmlMemoryV2 {
  unsigned int version;  // sizeof(NvmlMemoryV2) | (2 << 24)
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
static_assert(sizeof(NvmlMemoryV2) == 40, "nvmlMemory_v2_t is 40 bytes");
constexpr unsigned kNvmlMemoryV2Version = static_cast<unsigned>(sizeof(NvmlMemoryV2)) | (2u << 24);
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlErrorInsufficientSize = 7;
constexpr unsigned kNvmlStringBytes = 96;
constexpr int kNvmlClockSm = 1;
constexpr int kNvmlClockMem = 2;
constexpr int kNvmlTemperatureGpu = 0;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The first of the versioned names that the library exports (newest first).
template <typename Fn>
Fn find(void* handle, std::initializer_list<const char*> names, std::string* found = nullptr) {
  for (const char* n : names) {
    if (void* p = ::dlsym(handle, n)) {
      if (found) *found = n;
      return reinterpret_cast<Fn>(p);
    }
  }
  return nullptr;
}

// Owns a dlopen handle (query_nvml's short-lived use).
class Library {
 public:
  explicit Library(const char* name) : handle_(::dlopen(name, RTLD_LAZY | RTLD_LOCAL)) {}
  ~Library() {
    if (handle_ != nullptr) ::dlclose(handle_);
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  void* get() const { return handle_; }

 private:
  void* handle_;
};

// nvmlGpuP2PCapsIndex_t's NVLink entry and nvmlGpuP2PStatus_t's OK.
constexpr int kNvmlP2PCapsNvlink = 2;
constexpr int kNvmlP2PStatusOk = 0;

// nvmlGpuTopologyLevel_t as `nvidia-smi topo -m` abbreviates it.
std::string pcie_path_name(int level) {
  switch (level) {
    case 0:
      return "same board";
    case 10:
      return "PIX";
    case 20:
      return "PXB";
    case 30:
      return "PHB";
    case 40:
      return "NODE";
    case 50:
      return "SYS";
    default:
      return "";
  }
}

}  // namespace

struct NvmlApi::Functions {
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*memory_v1)(NvmlDeviceHandle, NvmlMemoryV1*) = nullptr;
  NvmlReturn (*memory_v2)(NvmlDeviceHandle, NvmlMemoryV2*) = nullptr;
  NvmlReturn (*processes)(NvmlDeviceHandle, unsigned*, void*) = nullptr;
  NvmlReturn (*power)(NvmlDeviceHandle, unsigned*) = nullptr;
  NvmlReturn (*energy)(NvmlDeviceHandle, unsigned long long*) = nullptr;
  NvmlReturn (*clock)(NvmlDeviceHandle, int, unsigned*) = nullptr;
  NvmlReturn (*utilization)(NvmlDeviceHandle, NvmlUtilization*) = nullptr;
  NvmlReturn (*temperature)(NvmlDeviceHandle, int, unsigned*) = nullptr;
};

std::unique_ptr<NvmlApi> NvmlApi::open(const std::string& library, std::string* why) {
  void* handle = ::dlopen(library.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) {
    *why = "cannot load " + library + " (no NVIDIA driver here)";
    return nullptr;
  }
  auto init = find<NvmlReturn (*)()>(handle, {"nvmlInit_v2", "nvmlInit"});
  auto count =
      find<NvmlReturn (*)(unsigned*)>(handle, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  auto by_index = find<NvmlReturn (*)(unsigned, NvmlDeviceHandle*)>(
      handle, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  auto shutdown = find<NvmlReturn (*)()>(handle, {"nvmlShutdown"});
  if (!init || !count || !by_index || !shutdown) {
    ::dlclose(handle);
    *why = library + " lacks nvmlInit/nvmlDeviceGetCount; not an NVML library";
    return nullptr;
  }
  if (const NvmlReturn r = init(); r != kNvmlSuccess) {
    ::dlclose(handle);
    *why = "nvmlInit failed with NVML error " + std::to_string(r);
    return nullptr;
  }
  std::unique_ptr<NvmlApi> api(new NvmlApi());
  api->handle_ = handle;
  api->fn_ = std::make_unique<Functions>();
  Functions& f = *api->fn_;
  f.shutdown = shutdown;
  f.memory_v1 = find<decltype(f.memory_v1)>(handle, {"nvmlDeviceGetMemoryInfo"});
  f.memory_v2 = find<decltype(f.memory_v2)>(handle, {"nvmlDeviceGetMemoryInfo_v2"});
  f.processes = find<decltype(f.processes)>(
      handle,
      {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
       "nvmlDeviceGetComputeRunningProcesses"},
      &api->process_symbol_);
  if (f.processes) {
    const bool widened_v3 = api->process_symbol_.ends_with("_v3") &&
                            ::dlsym(handle, "nvmlDeviceGetConfComputeMemSizeInfo") != nullptr &&
                            ::dlsym(handle, "nvmlDeviceGetRunningProcessDetailList") == nullptr;
    const bool v1 = api->process_symbol_ == "nvmlDeviceGetComputeRunningProcesses";
    api->process_stride_bytes_ = widened_v3 ? 32 : v1 ? 16 : 24;
  }
  f.power = find<decltype(f.power)>(handle, {"nvmlDeviceGetPowerUsage"});
  f.energy = find<decltype(f.energy)>(handle, {"nvmlDeviceGetTotalEnergyConsumption"});
  f.clock = find<decltype(f.clock)>(handle, {"nvmlDeviceGetClockInfo"});
  f.utilization = find<decltype(f.utilization)>(handle, {"nvmlDeviceGetUtilizationRates"});
  f.temperature = find<decltype(f.temperature)>(handle, {"nvmlDeviceGetTemperature"});
  auto name =
      find<NvmlReturn (*)(NvmlDeviceHandle, char*, unsigned)>(handle, {"nvmlDeviceGetName"});

  unsigned n = 0;
  if (count(&n) != kNvmlSuccess) n = 0;
  for (unsigned i = 0; i < n; ++i) {
    NvmlDeviceHandle dev = nullptr;
    if (by_index(i, &dev) != kNvmlSuccess) continue;
    char text[kNvmlStringBytes] = {};
    api->devices_.push_back(dev);
    api->names_.push_back(name && name(dev, text, kNvmlStringBytes) == kNvmlSuccess ? text : "");
  }
  return api;
}

NvmlApi::~NvmlApi() {
  if (fn_ && fn_->shutdown) fn_->shutdown();
  if (handle_ != nullptr) ::dlclose(handle_);
}

NvmlReading NvmlApi::read(int device, bool with_processes) const {
  NvmlReading r{kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN};
  auto dev = static_cast<NvmlDeviceHandle>(devices_[static_cast<size_t>(device)]);
  const Functions& f = *fn_;
  auto d = [](unsigned long long v) { return static_cast<double>(v); };
  if (f.memory_v2) {
    NvmlMemoryV2 m{};
    m.version = kNvmlMemoryV2Version;
    if (f.memory_v2(dev, &m) == kNvmlSuccess) {
      r.used_bytes = d(m.used);
      r.reserved_bytes = d(m.reserved);
      r.free_bytes = d(m.free);
      r.total_bytes = d(m.total);
    }
  }
  if (f.memory_v1) {
    NvmlMemoryV1 m{};
    if (f.memory_v1(dev, &m) == kNvmlSuccess) {
      r.v1_used_bytes = d(m.used);
      if (r.total_bytes != r.total_bytes) r.total_bytes = d(m.total);
    }
  }
  if (with_processes && f.processes) {
    // Two calls: the count, then the records (with headroom: processes come and go between).
    unsigned n = 0;
    NvmlReturn st = f.processes(dev, &n, nullptr);
    if (st == kNvmlSuccess || st == kNvmlErrorInsufficientSize) {
      n += 8;
      std::vector<unsigned char> buf(static_cast<size_t>(n) * process_stride_bytes_);
      if (f.processes(dev, &n, buf.data()) == kNvmlSuccess) {
        const auto self = static_cast<unsigned>(::getpid());
        double mine = 0;
        bool seen = false;
        for (unsigned i = 0; i < n; ++i) {
          const unsigned char* rec = buf.data() + static_cast<size_t>(i) * process_stride_bytes_;
          unsigned pid = 0;
          unsigned long long used = 0;
          std::memcpy(&pid, rec, sizeof pid);        // offset 0
          std::memcpy(&used, rec + 8, sizeof used);  // offset 8 in every layout
          const bool sane =
              used != std::numeric_limits<unsigned long long>::max() && !(d(used) > r.total_bytes);
          if (pid == self && sane) {
            mine += d(used);
            seen = true;
          }
        }
        if (seen) r.process_used_bytes = mine;
      }
    }
  }
  unsigned v = 0;
  if (f.power && f.power(dev, &v) == kNvmlSuccess) r.power_w = v / 1000.0;
  unsigned long long mj = 0;
  if (f.energy && f.energy(dev, &mj) == kNvmlSuccess) r.energy_j = d(mj) / 1000.0;
  if (f.clock && f.clock(dev, kNvmlClockSm, &v) == kNvmlSuccess) r.sm_clock_mhz = v;
  if (f.clock && f.clock(dev, kNvmlClockMem, &v) == kNvmlSuccess) r.mem_clock_mhz = v;
  NvmlUtilization u{};
  if (f.utilization && f.utilization(dev, &u) == kNvmlSuccess) {
    r.util_gpu_pct = u.gpu;
    r.util_memory_pct = u.memory;
  }
  if (f.temperature && f.temperature(dev, kNvmlTemperatureGpu, &v) == kNvmlSuccess) {
    r.temperature_c = v;
  }
  return r;
}

nlohmann::json NvmlApi::describe() const {
  const Functions& f = *fn_;
  std::string memory = "none";
  if (f.memory_v2) {
    memory = fmt::format("nvmlDeviceGetMemoryInfo_v2 (version {:#010x}) + nvmlDeviceGetMemoryInfo",
                         kNvmlMemoryV2Version);
  } else if (f.memory_v1) {
    memory = "nvmlDeviceGetMemoryInfo only (its used includes the reservation)";
  }
  return nlohmann::json{{"memory_info", memory},
                        {"processes", f.processes ? process_symbol_ : "none"},
                        {"process_record_bytes", process_stride_bytes_},
                        {"energy_counter", f.energy != nullptr},
                        {"power", f.power != nullptr}};
}

std::optional<NvmlSnapshot> query_nvml(const char* library) {
  Library lib(library);
  void* h = lib.get();
  if (h == nullptr) return std::nullopt;
  auto init = find<NvmlReturn (*)()>(h, {"nvmlInit_v2", "nvmlInit"});
  auto shutdown = find<NvmlReturn (*)()>(h, {"nvmlShutdown"});
  auto driver = find<NvmlReturn (*)(char*, unsigned)>(h, {"nvmlSystemGetDriverVersion"});
  auto cuda = find<NvmlReturn (*)(int*)>(
      h, {"nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"});
  auto count = find<NvmlReturn (*)(unsigned*)>(h, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  auto handle = find<NvmlReturn (*)(unsigned, NvmlDeviceHandle*)>(
      h, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  auto name = find<NvmlReturn (*)(NvmlDeviceHandle, char*, unsigned)>(h, {"nvmlDeviceGetName"});
  auto uuid = find<NvmlReturn (*)(NvmlDeviceHandle, char*, unsigned)>(h, {"nvmlDeviceGetUUID"});
  auto memory =
      find<NvmlReturn (*)(NvmlDeviceHandle, NvmlMemoryV1*)>(h, {"nvmlDeviceGetMemoryInfo"});
  // The enums are ints: nvmlGpuTopologyLevel_t, nvmlGpuP2PCapsIndex_t, nvmlGpuP2PStatus_t.
  auto ancestor = find<NvmlReturn (*)(NvmlDeviceHandle, NvmlDeviceHandle, int*)>(
      h, {"nvmlDeviceGetTopologyCommonAncestor"});
  auto p2p = find<NvmlReturn (*)(NvmlDeviceHandle, NvmlDeviceHandle, int, int*)>(
      h, {"nvmlDeviceGetP2PStatus"});
  if (!init || !shutdown || !count || !handle || init() != kNvmlSuccess) return std::nullopt;

  NvmlSnapshot snap;
  char text[kNvmlStringBytes] = {};
  if (driver && driver(text, kNvmlStringBytes) == kNvmlSuccess) snap.driver_version = text;
  if (cuda) cuda(&snap.cuda_driver_version);
  unsigned n = 0;
  std::vector<NvmlDeviceHandle> handles;
  if (count(&n) == kNvmlSuccess) {
    for (unsigned i = 0; i < n; ++i) {
      NvmlDeviceHandle dev = nullptr;
      if (handle(i, &dev) != kNvmlSuccess) continue;
      handles.push_back(dev);
      NvmlDevice d;
      d.index = static_cast<int>(i);
      if (name && name(dev, text, kNvmlStringBytes) == kNvmlSuccess) d.name = text;
      if (uuid && uuid(dev, text, kNvmlStringBytes) == kNvmlSuccess) d.uuid = text;
      NvmlMemoryV1 mem{};
      if (memory && memory(dev, &mem) == kNvmlSuccess) {
        d.memory_total_bytes = static_cast<int64_t>(mem.total);
        d.memory_used_bytes = static_cast<int64_t>(mem.used);
      }
      snap.devices.push_back(std::move(d));
    }
  }
  for (size_t i = 0; i < handles.size(); ++i) {
    for (size_t j = i + 1; j < handles.size(); ++j) {
      NvmlLink link;
      link.a = snap.devices[i].index;
      link.b = snap.devices[j].index;
      int level = -1;
      if (ancestor && ancestor(handles[i], handles[j], &level) == kNvmlSuccess)
        link.pcie = pcie_path_name(level);
      int status = -1;
      if (p2p && p2p(handles[i], handles[j], kNvmlP2PCapsNvlink, &status) == kNvmlSuccess)
        link.nvlink = status == kNvmlP2PStatusOk;
      snap.links.push_back(std::move(link));
    }
  }
  shutdown();
  if (snap.devices.empty()) return std::nullopt;
  return snap;
}

}  // namespace ib::detail
