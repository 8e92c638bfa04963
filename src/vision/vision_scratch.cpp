// VisionScratch: grow-only buffers handed out in call order.
#include "vision/vision_scratch.h"

namespace ib {

namespace {

// buffer viewed as dims of type, reallocated first when too small.
Result<Tensor> fit(Backend& backend, Buffer& buffer, std::initializer_list<int64_t> dims,
                   DType type) {
  const size_t bytes = Tensor(nullptr, type, dims).bytes();
  if (buffer.bytes() < bytes) {
    buffer.reset();  // freed first, so that the larger one fits where the old one was
    IB_ASSIGN_OR_RETURN(buffer, backend.alloc(bytes, MemoryTag::kActivations));
  }
  return buffer.view(type, dims);
}

}  // namespace

Result<Tensor> VisionScratch::alloc(std::initializer_list<int64_t> dims,
                                    std::optional<DType> dtype) {
  if (next_ == buffers_.size()) buffers_.emplace_back();
  return fit(backend_, buffers_[next_++], dims, dtype.value_or(backend_.activation_dtype()));
}

Result<Tensor> VisionScratch::input(std::initializer_list<int64_t> dims,
                                    std::optional<DType> dtype) {
  return fit(backend_, input_, dims, dtype.value_or(backend_.activation_dtype()));
}

int64_t VisionScratch::bytes() const {
  auto total = static_cast<int64_t>(input_.bytes());
  for (const Buffer& b : buffers_) total += static_cast<int64_t>(b.bytes());
  return total;
}

}  // namespace ib
