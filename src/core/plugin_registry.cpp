#include "core/plugin_registry.h"

#include <algorithm>
#include <map>

namespace ib {

const char* plugin_kind_name(PluginKind kind) {
  switch (kind) {
    case PluginKind::kTarget: return "target";
    case PluginKind::kWorkload: return "workload";
    case PluginKind::kCollector: return "collector";
    case PluginKind::kReportSink: return "report-sink";
  }
  return "?";
}

Status PluginRegistry::add(PluginInfo info, std::any factory) {
  if (info.name.empty()) return user_error("a plugin needs a non-empty name");
  if (contains(info.name)) return user_error("plugin '" + info.name + "' is registered twice");
  infos_.push_back(std::move(info));
  factories_.push_back(std::move(factory));
  return Ok{};
}

bool PluginRegistry::contains(const std::string& name) const { return find(name) != nullptr; }

const PluginInfo* PluginRegistry::find(const std::string& name) const {
  for (const auto& i : infos_) {
    if (i.name == name) return &i;
  }
  return nullptr;
}

std::vector<std::string> PluginRegistry::names_of(PluginKind kind) const {
  std::vector<std::string> out;
  for (const auto& i : infos_) {
    if (i.kind == kind) out.push_back(i.name);
  }
  return out;
}

Result<std::vector<std::string>> PluginRegistry::load_order() const {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < infos_.size(); ++i) index[infos_[i].name] = i;
  for (const auto& info : infos_) {
    for (const auto& dep : info.depends_on) {
      if (!index.count(dep)) {
        return user_error("plugin '" + info.name + "' depends on '" + dep +
                          "', which is not registered; register it or drop the dependency");
      }
    }
  }
  // Depth-first search with colours; the grey stack names a cycle when one is found.
  enum Colour { kWhite, kGrey, kBlack };
  std::vector<Colour> colour(infos_.size(), kWhite);
  std::vector<size_t> stack;
  std::vector<std::string> order;
  std::string cycle;
  auto visit = [&](auto&& self, size_t v) -> bool {
    colour[v] = kGrey;
    stack.push_back(v);
    for (const auto& dep : infos_[v].depends_on) {
      const size_t d = index[dep];
      if (colour[d] == kGrey) {
        auto it = std::find(stack.begin(), stack.end(), d);
        for (; it != stack.end(); ++it) cycle += infos_[*it].name + " -> ";
        cycle += infos_[d].name;
        return false;
      }
      if (colour[d] == kWhite && !self(self, d)) return false;
    }
    stack.pop_back();
    colour[v] = kBlack;
    order.push_back(infos_[v].name);
    return true;
  };
  for (size_t v = 0; v < infos_.size(); ++v) {
    if (colour[v] == kWhite && !visit(visit, v)) {
      return user_error("plugin dependency cycle: " + cycle + "; break one of these dependencies");
    }
  }
  return order;
}

}  // namespace ib
