// File helpers that never leave a half-written file: write to a temporary sibling, then rename.
#pragma once

#include <filesystem>
#include <string>

#include "core/result.h"

namespace ib {

Status write_file_atomic(const std::filesystem::path& path, const std::string& content);
Result<std::string> read_file(const std::filesystem::path& path);
// Checks that dir can be created (or exists and is writable) without creating it.
Status check_writable_dir(const std::filesystem::path& dir);

}  // namespace ib
