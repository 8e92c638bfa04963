// A fake NVML for the loader tests: two GPUs with scripted readings that change on every call,
// exported under the driver library's symbol names. It refuses an nvmlMemory_v2_t whose version
// word is wrong, as the driver does, so the test also checks the struct tag.
//
// Scripted values (device i = 0, 1; k = how many times that call was made before, per device):
//   memory v2: total 80 GiB, reserved 512 MiB, used (i + 1) GiB + k MiB, free = total - both
//   memory v1: used = v2 used + reserved (v1 counts the reservation)
//   processes (_v3, 24-byte records): this process 123 MiB, pid 1 7 MiB
//   power 250 W (gpu 0) / 100 W (gpu 1); energy counter 5,000,000 mJ + k * 1000 mJ
//   clocks SM 1980 MHz, memory 2619 MHz; utilisation 75 % / 40 %; temperature 55 C
//   topology: the two GPUs under one host bridge (level 30, "PHB"), peers over NVLink
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace {

struct MemoryV1 {
  unsigned long long total, free, used;
};
struct MemoryV2 {
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
struct ProcessInfo {
  unsigned int pid;
  unsigned long long used;
  unsigned int gpu_instance, compute_instance;
};
struct Utilization {
  unsigned int gpu, memory;
};

constexpr unsigned long long kGiB = 1ull << 30;
constexpr unsigned long long kMiB = 1ull << 20;
constexpr int kSuccess = 0;
constexpr int kInvalidArgument = 2;
constexpr int kInsufficientSize = 7;
constexpr int kVersionMismatch = 25;

unsigned long long memory_calls[2] = {0, 0};
unsigned long long energy_calls[2] = {0, 0};

int index_of(void* device) {
  const auto i = reinterpret_cast<std::uintptr_t>(device);
  return i == 1 || i == 2 ? static_cast<int>(i - 1) : -1;
}

}  // namespace

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

FAKE_EXPORT int nvmlInit_v2() {
  return kSuccess;
}
FAKE_EXPORT int nvmlShutdown() {
  return kSuccess;
}
FAKE_EXPORT int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = 2;
  return kSuccess;
}
FAKE_EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (index >= 2) return kInvalidArgument;
  *device = reinterpret_cast<void*>(static_cast<std::uintptr_t>(index + 1));
  return kSuccess;
}
FAKE_EXPORT int nvmlDeviceGetName(void* device, char* name, unsigned length) {
  const char* names[] = {"Fake GPU 0", "Fake GPU 1"};
  const int i = index_of(device);
  if (i < 0 || length < 11) return kInvalidArgument;
  std::strcpy(name, names[i]);
  return kSuccess;
}
FAKE_EXPORT int nvmlDeviceGetMemoryInfo_v2(void* device, MemoryV2* m) {
  const int i = index_of(device);
  if (i < 0) return kInvalidArgument;
  if (m->version != (static_cast<unsigned>(sizeof(MemoryV2)) | (2u << 24))) return kVersionMismatch;
  const unsigned long long k = memory_calls[i]++;
  m->total = 80 * kGiB;
  m->reserved = 512 * kMiB;
  m->used = static_cast<unsigned long long>(i + 1) * kGiB + k * kMiB;
  m->free = m->total - m->reserved - m->used;
  return kSuccess;
}
FAKE_EXPORT int nvmlDeviceGetMemoryInfo(void* device, MemoryV1* m) {
  const int i = index_of(device);
  if (i < 0) return kInvalidArgument;
  const unsigned long long k = memory_calls[i] > 0 ? memory_calls[i] - 1 : 0;
  m->total = 80 * kGiB;
  m->used = static_cast<unsigned long long>(i + 1) * kGiB + k * kMiB + 512 * kMiB;
  m->free = m->total - m->used;
  return kSuccess;
}
FAKE_EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned* count,
                                                        ProcessInfo* infos) {
  if (index_of(device) < 0) return kInvalidArgument;
  if (*count < 2 || infos == nullptr) {
    *count = 2;
    return kInsufficientSize;
  }
  infos[0] = {static_cast<unsigned>(::getpid()), 123 * kMiB, 0xFFFFFFFFu, 0xFFFFFFFFu};
  infos[1] = {1u, 7 * kMiB, 0xFFFFFFFFu, 0xFFFFFFFFu};
  *count = 2;
  return kSuccess;
}
FAKE_EXPORT int nvmlDeviceGetPowerUsage(void* device, unsigned* milliwatts) {
  const int i = index_of(device);
  if (i < 0) return kInvalidArgument;
  *milliwatts = i == 0 ? 250000 : 100000;
  return kSuccess;
}
FAKE_EXPORT int nvmlDeviceGetTotalEnergyConsumption(void* device, unsigned long long* millijoules) {
  const int i = index_of(device);
  if (i < 0) return kInvalidArgument;
  *millijoules = 5000000ull + energy_calls[i]++ * 1000ull;
  return kSuccess;
}
FAKE_EXPORT int nvmlDeviceGetClockInfo(void* device, int type, unsigned* mhz) {
  if (index_of(device) < 0) return kInvalidArgument;
  *mhz = type == 1 ? 1980 : 2619;
  return kSuccess;
}
FAKE_EXPORT int nvmlDeviceGetUtilizationRates(void* device, Utilization* u) {
  if (index_of(device) < 0) return kInvalidArgument;
  *u = {75, 40};
  return kSuccess;
}
FAKE_EXPORT int nvmlDeviceGetTemperature(void* device, int sensor, unsigned* celsius) {
  if (index_of(device) < 0 || sensor != 0) return kInvalidArgument;
  *celsius = 55;
  return kSuccess;
}
FAKE_EXPORT int nvmlDeviceGetTopologyCommonAncestor(void* a, void* b, int* level) {
  if (index_of(a) < 0 || index_of(b) < 0) return kInvalidArgument;
  *level = a == b ? 0 : 30;
  return kSuccess;
}
FAKE_EXPORT int nvmlDeviceGetP2PStatus(void* a, void* b, int caps, int* status) {
  if (index_of(a) < 0 || index_of(b) < 0) return kInvalidArgument;
  *status = caps == 2 ? 0 : 5;  // NVLink: OK; the rest: unknown
  return kSuccess;
}
