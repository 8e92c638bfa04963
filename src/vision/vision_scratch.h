// A vision forward's activation scratch, kept between calls: the n-th tensor a forward asks for
// takes the n-th buffer, reallocated only when the forward needs it larger. An encoder that owns
// one allocates on its first and on larger batches only (measured: allocating and freeing the
// CLIP-L tower's scratch took 0.69 ms of an 11.8 ms 8-image call, bench/NOTES.md); the buffers
// stay allocated (MemoryTag::kActivations) for the encoder's life. A forward given none makes
// its own and frees it at the end.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "core/result.h"

namespace ib {

class VisionScratch {
 public:
  explicit VisionScratch(Backend& backend) : backend_(backend) {}
  // A forward starts: its first alloc() takes the first buffer again.
  void begin() { next_ = 0; }
  // The forward's next tensor of shape dims, in the backend's activation dtype unless given.
  Result<Tensor> alloc(std::initializer_list<int64_t> dims, std::optional<DType> dtype = {});
  // The forward's input (host pixels uploaded): a buffer of its own, kept like the others and
  // not handed out by alloc().
  Result<Tensor> input(std::initializer_list<int64_t> dims, std::optional<DType> dtype = {});
  // Bytes the buffers hold.
  int64_t bytes() const;

 private:
  Backend& backend_;
  std::vector<Buffer> buffers_;
  Buffer input_;
  size_t next_ = 0;
};

}  // namespace ib
