// PluginRegistry: targets, workloads, collectors and report sinks register here with a name, a
// version and dependencies; the registry resolves load order topologically and refuses cycles and
// missing dependencies. Factories are type-erased; each subsystem defines its factory signature
// and fetches it with factory<F>(name). Built explicitly by the CLI (no static registration).
#pragma once

#include <any>
#include <string>
#include <vector>

#include "core/result.h"

namespace ib {

enum class PluginKind { kTarget, kWorkload, kCollector, kReportSink };
const char* plugin_kind_name(PluginKind kind);

struct PluginInfo {
  std::string name;  // unique across kinds, e.g. "native", "random", "rss", "json"
  std::string version;
  PluginKind kind = PluginKind::kTarget;
  std::vector<std::string> depends_on;  // names of other plugins
  std::string description;
};

class PluginRegistry {
 public:
  // Refuses a duplicate name.
  Status add(PluginInfo info, std::any factory);

  const std::vector<PluginInfo>& plugins() const { return infos_; }
  bool contains(const std::string& name) const;
  const PluginInfo* find(const std::string& name) const;

  // All plugins in dependency order (dependencies first; ties by registration order).
  // Errors name the cycle or the missing dependency.
  Result<std::vector<std::string>> load_order() const;

  // The factory registered under name, if it has type F.
  template <typename F>
  Result<F> factory(const std::string& name) const {
    for (size_t i = 0; i < infos_.size(); ++i) {
      if (infos_[i].name != name) continue;
      if (const F* f = std::any_cast<F>(&factories_[i])) return *f;
      return Error{ErrorKind::kInternal, "plugin '" + name + "' has a factory of another type"};
    }
    return user_error("unknown plugin '" + name + "'; `inferbench plugins` lists them");
  }

  // Names of the plugins of one kind, in registration order.
  std::vector<std::string> names_of(PluginKind kind) const;

 private:
  std::vector<PluginInfo> infos_;
  std::vector<std::any> factories_;
};

}  // namespace ib
