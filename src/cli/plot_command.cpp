// `inferbench plot DIR... --out FILE`: checks the output and --frames, then draws the cross-run
// memory heatmap (orchestrate/); with --expert-load, one MoE run's layer x expert heatmap.
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "cli/commands.h"
#include "orchestrate/orchestrate.h"

namespace ib {
namespace {

namespace fs = std::filesystem;

Result<std::string> output_kind(const std::string& out) {
  const std::string ext = fs::path(out).extension().string();
  if (ext == ".svg" || ext == ".html") return ext.substr(1);
  return user_error(fmt::format(
      "--out {}: write a .svg or a .html file (the format follows the extension)", out));
}

// The output must be creatable: checked before any directory is read.
Status check_output(const std::string& out) {
  std::error_code ec;
  if (fs::is_directory(out, ec)) {
    return user_error(fmt::format("--out {} is a directory; name a file", out));
  }
  if (fs::exists(out, ec) && ::access(out.c_str(), W_OK) != 0) {
    return user_error(fmt::format("--out {}: the file is not writable; choose another path", out));
  }
  // The nearest existing ancestor must be a writable directory (missing ones are created).
  fs::path p = fs::absolute(fs::path(out)).parent_path();
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  if (!fs::is_directory(p, ec) || ::access(p.c_str(), W_OK) != 0) {
    return user_error(
        fmt::format("--out {}: cannot write under {}; choose another path", out, p.string()));
  }
  return Ok{};
}

}  // namespace

Result<int> execute_plot(const PlotFlags& flags) {
  IB_ASSIGN_OR_RETURN(const std::string kind, output_kind(flags.out));
  IB_TRY(check_output(flags.out));
  if (flags.expert_load) {
    if (kind != "svg") {
      return user_error(
          fmt::format("--expert-load --out {}: the expert-load heatmap is an .svg", flags.out));
    }
    if (flags.dirs.size() != 1) {
      return user_error(fmt::format("--expert-load draws one run; {} result directories were given",
                                    flags.dirs.size()));
    }
    IB_TRY(write_expert_load(flags.dirs.front(), flags.out));
    return kExitOk;
  }
  if (flags.frames < 2 || flags.frames > 2000) {
    return user_error(fmt::format("--frames {} must be in [2, 2000]", flags.frames));
  }
  IB_TRY(write_memory_heatmap(flags.dirs, flags.out, flags.frames));
  return kExitOk;
}

}  // namespace ib
