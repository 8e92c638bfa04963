// A read-only memory-mapped file (private to model/): the bytes stay valid while it lives.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/result.h"

namespace ib::detail {

class MappedFile {
 public:
  // Maps path read-only; an empty file maps to an empty view. Errors name the file.
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::string_view bytes() const { return {static_cast<const char*>(data_), size_bytes_}; }
  const std::string& path() const { return path_; }

 private:
  void release();

  std::string path_;
  void* data_ = nullptr;
  size_t size_bytes_ = 0;
};

}  // namespace ib::detail
