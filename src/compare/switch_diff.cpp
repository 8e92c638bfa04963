// The kernel switches of two results (result.json "kernel_switches"), switch by switch.
#include <fmt/format.h>

#include <set>

#include "compare/compare.h"

namespace ib {
namespace {

using nlohmann::json;

// "1 (env)", "0 (default)", "2 (env, not applied)", "absent".
std::string setting_text(const json& switches, const std::string& name) {
  if (!switches.contains(name) || !switches[name].is_object()) return "absent";
  const json& s = switches[name];
  const json& value = s.contains("value") ? s["value"] : json(nullptr);
  const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
  const std::string source = s.value("source", "unknown source");
  return fmt::format("{} ({}{})", text, source, s.value("applies", true) ? "" : ", not applied");
}

bool applied(const json& switches, const std::string& name) {
  return switches.contains(name) && switches[name].is_object() &&
         switches[name].value("applies", true);
}

}  // namespace

std::vector<SwitchDifference> switch_differences(const json& a, const json& b) {
  std::vector<SwitchDifference> out;
  if (!a.contains("kernel_switches") || !b.contains("kernel_switches")) return out;
  const json& sa = a["kernel_switches"];
  const json& sb = b["kernel_switches"];
  std::set<std::string> names;  // every name on either side, known to this build or not
  for (const json* s : {&sa, &sb}) {
    if (!s->is_object()) continue;
    for (const auto& [name, setting] : s->items()) names.insert(name);
  }
  for (const auto& name : names) {
    const bool applied_a = applied(sa, name);
    const bool applied_b = applied(sb, name);
    const json va = sa.contains(name) ? sa[name].value("value", json(nullptr)) : json(nullptr);
    const json vb = sb.contains(name) ? sb[name].value("value", json(nullptr)) : json(nullptr);
    if (applied_a == applied_b && va == vb) continue;  // the source alone does not matter
    out.push_back({name, setting_text(sa, name), setting_text(sb, name), applied_a && applied_b});
  }
  return out;
}

std::string switch_difference_text(const SwitchDifference& d) {
  return fmt::format("{}: {} vs {}", d.name, d.a, d.b);
}

bool Comparison::switches_refuse() const {
  for (const auto& d : switch_differences) {
    if (d.refuses) return true;
  }
  return false;
}

}  // namespace ib
