#include "core/fs.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ib {

namespace fs = std::filesystem;

Status write_file_atomic(const fs::path& path, const std::string& content) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      return runtime_error("cannot write " + tmp.string() + ": " + std::strerror(errno));
    }
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) return runtime_error("write to " + tmp.string() + " failed (disk full?)");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return runtime_error("cannot rename " + tmp.string() + ": " + ec.message());
  return Ok{};
}

Result<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return user_error("cannot read " + path.string() + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status check_writable_dir(const fs::path& dir) {
  fs::path p = dir.empty() ? fs::path(".") : fs::absolute(dir);
  // Walk up to the first existing ancestor; it must be a writable directory.
  while (!p.empty() && !fs::exists(p)) p = p.parent_path();
  if (p.empty()) p = ".";
  if (!fs::is_directory(p)) {
    return user_error(p.string() + " is not a directory; choose another --result-dir");
  }
  if (::access(p.c_str(), W_OK) != 0) {
    return user_error("cannot write under " + p.string() + "; choose a writable --result-dir");
  }
  return Ok{};
}

}  // namespace ib
