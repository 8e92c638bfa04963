// Buffer and Device: the tracked allocation every op set runs on (device.h).
#include "backend/device.h"

namespace ib {

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    device_ = o.device_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    tag_ = o.tag_;
    o.device_ = nullptr;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Buffer::reset() {
  if (device_ && ptr_) device_->release(ptr_, bytes_, tag_);
  device_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

Tensor Buffer::view(DType dtype, std::initializer_list<int64_t> shape, size_t offset_bytes) const {
  Tensor t(static_cast<char*>(ptr_) + offset_bytes, dtype, shape);
  IB_ASSERT(offset_bytes + t.bytes() <= bytes_, "Buffer::view beyond the allocation");
  return t;
}

Error Device::cap_refusal(size_t bytes, MemoryTag tag) const {
  const auto limit = memory_.limit_bytes().value_or(0);
  return runtime_error("out of memory: allocating " + std::to_string(bytes) + " bytes for " +
                       memory_tag_name(tag) + " would exceed the memory limit of " +
                       std::to_string(limit) + " bytes");
}

Result<Buffer> Device::alloc(size_t bytes, MemoryTag tag) {
  const size_t rounded = alloc_bytes(bytes);
  if (!memory_.admit(static_cast<int64_t>(rounded))) return cap_refusal(rounded, tag);
  IB_ASSIGN_OR_RETURN(void* ptr, raw_alloc(rounded));
  memory_.on_alloc(reinterpret_cast<uint64_t>(ptr), static_cast<int64_t>(rounded), tag);
  return Buffer(this, ptr, rounded, tag);
}

void Device::release(void* ptr, size_t bytes, MemoryTag tag) {
  raw_free(ptr, bytes);
  memory_.on_free(reinterpret_cast<uint64_t>(ptr), static_cast<int64_t>(bytes), tag);
}

}  // namespace ib
