#include "telemetry/detail/nvml.h"

#include <dlfcn.h>

namespace ib::detail {
namespace {

// The subset of nvml.h used here (ABI-stable since R450).
using NvmlReturn = int;
using NvmlDeviceHandle = struct NvmlDeviceOpaque*;
struct NvmlMemoryV1 {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr unsigned kNvmlStringBytes = 96;

class Library {
 public:
  explicit Library(const char* name) : handle_(::dlopen(name, RTLD_LAZY | RTLD_LOCAL)) {}
  ~Library() {
    if (handle_ != nullptr) ::dlclose(handle_);
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  bool loaded() const { return handle_ != nullptr; }
  // The first of the versioned names that the library exports (newest first).
  template <typename Fn>
  Fn find(std::initializer_list<const char*> names) const {
    for (const char* n : names) {
      if (void* p = ::dlsym(handle_, n)) return reinterpret_cast<Fn>(p);
    }
    return nullptr;
  }

 private:
  void* handle_;
};

}  // namespace

std::optional<NvmlSnapshot> query_nvml(const char* library) {
  Library lib(library);
  if (!lib.loaded()) return std::nullopt;
  auto init = lib.find<NvmlReturn (*)()>({"nvmlInit_v2", "nvmlInit"});
  auto shutdown = lib.find<NvmlReturn (*)()>({"nvmlShutdown"});
  auto driver = lib.find<NvmlReturn (*)(char*, unsigned)>({"nvmlSystemGetDriverVersion"});
  auto cuda = lib.find<NvmlReturn (*)(int*)>(
      {"nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"});
  auto count = lib.find<NvmlReturn (*)(unsigned*)>({"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  auto handle = lib.find<NvmlReturn (*)(unsigned, NvmlDeviceHandle*)>(
      {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  auto name = lib.find<NvmlReturn (*)(NvmlDeviceHandle, char*, unsigned)>({"nvmlDeviceGetName"});
  auto uuid = lib.find<NvmlReturn (*)(NvmlDeviceHandle, char*, unsigned)>({"nvmlDeviceGetUUID"});
  auto memory =
      lib.find<NvmlReturn (*)(NvmlDeviceHandle, NvmlMemoryV1*)>({"nvmlDeviceGetMemoryInfo"});
  if (!init || !shutdown || !count || !handle || init() != kNvmlSuccess) return std::nullopt;

  NvmlSnapshot snap;
  char text[kNvmlStringBytes] = {};
  if (driver && driver(text, kNvmlStringBytes) == kNvmlSuccess) snap.driver_version = text;
  if (cuda) cuda(&snap.cuda_driver_version);
  unsigned n = 0;
  if (count(&n) == kNvmlSuccess) {
    for (unsigned i = 0; i < n; ++i) {
      NvmlDeviceHandle dev = nullptr;
      if (handle(i, &dev) != kNvmlSuccess) continue;
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
  shutdown();
  if (snap.devices.empty()) return std::nullopt;
  return snap;
}

}  // namespace ib::detail
