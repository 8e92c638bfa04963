// Tensor: a non-owning view of backend memory (host memory for the CPU backend, device memory
// for CUDA): pointer, dtype and a row-major contiguous shape of up to 4 dimensions.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>

#include "core/assert.h"
#include "core/dtype.h"

namespace ib {

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  std::array<int64_t, 4> shape{};
  int rank = 0;

  Tensor() = default;
  Tensor(void* ptr, DType t, std::initializer_list<int64_t> dims) : data(ptr), dtype(t) {
    IB_ASSERT(dims.size() <= 4, "Tensor rank above 4");
    for (int64_t d : dims) shape[static_cast<size_t>(rank++)] = d;
  }

  bool empty() const { return data == nullptr; }
  int64_t dim(int i) const {
    IB_ASSERT(i >= 0 && i < rank, "Tensor::dim out of range");
    return shape[static_cast<size_t>(i)];
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[static_cast<size_t>(i)];
    return rank == 0 ? 0 : n;
  }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  // Elements per row of the last dimension (row length for 2-D tensors).
  int64_t row_size() const { return rank == 0 ? 0 : shape[static_cast<size_t>(rank - 1)]; }
  int64_t rows() const { return row_size() == 0 ? 0 : numel() / row_size(); }

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }

  // Rows [begin, begin + count) of the first dimension, as a view.
  Tensor slice_rows(int64_t begin, int64_t count) const {
    IB_ASSERT(rank >= 1 && begin >= 0 && begin + count <= shape[0], "slice_rows out of range");
    Tensor t = *this;
    const int64_t stride = shape[0] == 0 ? 0 : numel() / shape[0];
    t.data = static_cast<char*>(data) + static_cast<size_t>(begin * stride) * dtype_size(dtype);
    t.shape[0] = count;
    return t;
  }
  // The same memory with another shape of equal element count.
  Tensor reshaped(std::initializer_list<int64_t> dims) const {
    Tensor t(data, dtype, dims);
    IB_ASSERT(t.numel() == numel(), "reshape changes the element count");
    return t;
  }
};

}  // namespace ib
