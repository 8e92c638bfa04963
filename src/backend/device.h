// Device: one backend's memory (every allocation through one tracked allocator), transfers,
// graphs, timing, error state and kernel switches — what every op set (ops.h) runs on. A
// communicator for tensor parallelism joins here.
//
// Contract: work is enqueued in call order on the device's single stream (the CPU runs it at
// once); results reach the host after synchronize() or copy_to_host(). One thread drives a
// device at a time (the engine's thread).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "backend/kernel_switches.h"
#include "backend/memory_tracker.h"
#include "backend/tensor.h"
#include "core/result.h"

namespace ib {

class Device;

// A recorded sequence of ops (a CUDA graph), replayed with the arguments it was captured with:
// callers change what the ops read by writing into the same buffers before replay(). The memory
// its instantiation took is tracked under MemoryTag::kGraph for as long as it lives. It must not
// outlive its device.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  virtual void replay() = 0;
  virtual int64_t bytes() const = 0;  // device memory its instantiation took
};

// An owning handle to one allocation; frees it through its device when destroyed.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device* device, void* ptr, size_t bytes, MemoryTag tag)
      : device_(device), ptr_(ptr), bytes_(bytes), tag_(tag) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void reset();
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  MemoryTag tag() const { return tag_; }
  // A tensor view at byte offset within this buffer.
  Tensor view(DType dtype, std::initializer_list<int64_t> shape, size_t offset_bytes = 0) const;

 private:
  Device* device_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  MemoryTag tag_ = MemoryTag::kOther;
};

struct DeviceInfo {
  std::string name;         // "cpu: AMD EPYC ..." or "NVIDIA H200"
  std::string kind;         // "cpu" or "cuda"
  int index = 0;            // device ordinal
  int64_t total_bytes = 0;  // device memory (host RAM for the CPU backend)
  int64_t free_bytes = 0;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual DeviceInfo device_info() const = 0;
  MemoryTracker& memory() { return memory_; }
  const MemoryTracker& memory() const { return memory_; }

  // Allocates bytes (256-byte aligned). Fails, without aborting, when the device is out of
  // memory or the tracker's cap would be exceeded.
  Result<Buffer> alloc(size_t bytes, MemoryTag tag);
  // The bytes alloc(bytes, ...) takes and the tracker counts: bytes rounded up to 256.
  static constexpr size_t alloc_bytes(size_t bytes) { return (bytes + 255) / 256 * 256; }
  // The error alloc() returns when the tracker's cap refuses bytes (rounded) for tag; callers
  // that refuse early (MemoryTracker::admit_after_free) return the same message.
  Error cap_refusal(size_t bytes, MemoryTag tag) const;

  // ---- transfers ----
  // dst <- host bytes of src_dtype, converting element type to dst.dtype (f32/bf16/f16).
  virtual void copy_from_host(Tensor dst, const void* src, DType src_dtype) = 0;
  // host <- src bytes, no conversion; synchronizes.
  virtual void copy_to_host(const Tensor& src, void* dst) = 0;
  // dst <- src, both in this device's memory, same dtype and element count, no conversion
  // (device to device, enqueued on the stream; the CPU copies at once).
  virtual void copy_on_device(Tensor dst, const Tensor& src) = 0;
  virtual void synchronize() = 0;

  // ---- optional: graphs, device timing, error state (the CPU has none of them) ----
  // Ops enqueued between begin_capture() and end_capture() are recorded into a DeviceGraph
  // instead of running. Ops must not synchronize, allocate or copy from the host meanwhile.
  virtual bool supports_graphs() const { return false; }
  virtual Status begin_capture() { return runtime_error("this backend has no graphs"); }
  virtual Result<std::unique_ptr<DeviceGraph>> end_capture() {
    return runtime_error("this backend has no graphs");
  }
  // Device time of the work enqueued between timer_start() and timer_stop(); read it after the
  // next synchronize() or copy_to_host(). nullopt when the device cannot be timed.
  virtual void timer_start() {}
  virtual void timer_stop() {}
  virtual std::optional<int64_t> timer_elapsed_ns() { return std::nullopt; }
  // Bytes per second (read + written) of a large device-to-device copy, measured once when the
  // backend started; 0 when not measured (CPU).
  virtual double copy_ceiling_bytes_per_s() const { return 0.0; }
  // The first device error since the backend started (a failed kernel launch or an asynchronous
  // fault seen at a synchronization), naming the op; once set, later ops are skipped. Ok while
  // every op succeeded.
  virtual Status device_status() const { return Ok{}; }

  // ---- kernel switches (kernel_switches.h), for result.json ----
  // The effective setting of every switch this backend read, whether from the environment or its
  // default. A backend that reads none (the CPU backend) reports the known switches the
  // environment sets, each marked as not applying.
  virtual KernelSwitches kernel_switches() const { return unapplied_kernel_switches(); }

 protected:
  virtual Result<void*> raw_alloc(size_t bytes) = 0;
  virtual void raw_free(void* ptr, size_t bytes) = 0;

 private:
  friend class Buffer;
  void release(void* ptr, size_t bytes, MemoryTag tag);
  MemoryTracker memory_;
};

}  // namespace ib
