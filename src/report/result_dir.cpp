#include "report/result_dir.h"

#include <fmt/format.h>

#include "core/clock.h"
#include "core/fs.h"

namespace ib {

namespace fs = std::filesystem;

Result<fs::path> plan_result_dir(const std::string& flag_value, const std::string& model_name,
                                 bool overwrite) {
  fs::path dir = flag_value;
  if (flag_value.empty()) {
    std::string safe = model_name;
    for (char& c : safe) {
      if (c == '/' || c == '\\' || c == ' ' || c == ':') c = '_';
    }
    dir = fs::path("results") / fmt::format("{}-{}", safe, utc_timestamp_compact());
  }
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) {
      return user_error(
          fmt::format("--result-dir {} is a file; choose a directory path", dir.string()));
    }
    if (!fs::is_empty(dir, ec) && !overwrite) {
      return user_error(fmt::format(
          "result directory {} exists and is not empty; pass --overwrite or choose another "
          "--result-dir",
          dir.string()));
    }
  }
  IB_TRY(check_writable_dir(dir));
  return dir;
}

Status create_result_dir(const fs::path& dir, bool overwrite) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return runtime_error(
        fmt::format("cannot create result directory {}: {}", dir.string(), ec.message()));
  }
  if (overwrite) {
    for (const char* name : {kResultJson, kRequestsJsonl, kSummaryCsv, "memory.csv",
                             "allocations.csv", "heatmap.svg", "report.html", "expert_load.svg"}) {
      fs::remove(dir / name, ec);
      if (ec) {
        return runtime_error(
            fmt::format("cannot remove {}: {}", (dir / name).string(), ec.message()));
      }
    }
  }
  return Ok{};
}

}  // namespace ib
