// Build provenance, generated at every build (cmake/build_info.cmake).
#pragma once

namespace ib {
struct BuildInfo {
  const char* version;
  const char* git_sha;
  bool git_dirty;
  const char* compiler;
  const char* build_type;
  bool cuda_enabled;
};
BuildInfo build_info();
}  // namespace ib
