// The suite state file: which entries finished, how, and with which arguments.
#include <fmt/format.h>

#include "core/fs.h"
#include "suite/suite.h"

namespace ib {

using nlohmann::json;

Result<SuiteState> SuiteState::load(const std::filesystem::path& dir) {
  const auto path = dir / kSuiteStateJson;
  IB_ASSIGN_OR_RETURN(const std::string text, read_file(path));
  const json j = json::parse(text, nullptr, false);
  const auto bad = [&](const std::string& what) {
    return user_error(
        fmt::format("{}: {}; delete the file to start the suite afresh", path.string(), what));
  };
  if (!j.is_object() || !j.contains("entries") || !j["entries"].is_array()) {
    return bad("not a suite state file (no 'entries' list)");
  }
  SuiteState state(j.value("suite", ""));
  for (const auto& e : j["entries"]) {
    if (!e.is_object() || !e.contains("name") || !e.contains("status") || !e.contains("args") ||
        !e["args"].is_array()) {
      return bad("an entry lacks name, status or args");
    }
    EntryState s;
    s.status = e["status"].get<std::string>();
    s.error = e.value("error", "");
    s.args = e["args"].get<std::vector<std::string>>();
    if (e.contains("eval_args") && e["eval_args"].is_array()) {
      s.eval_args = e["eval_args"].get<std::vector<std::string>>();
    }
    s.wall_s = e.value("wall_s", 0.0);
    state.record(e["name"].get<std::string>(), std::move(s));
  }
  return state;
}

Status SuiteState::save(const std::filesystem::path& dir) const {
  json entries = json::array();
  for (const auto& [name, s] : entries_) {
    json e{{"name", name}, {"status", s.status}, {"error", s.error}, {"args", s.args}};
    if (s.eval_args) e["eval_args"] = *s.eval_args;
    e["wall_s"] = s.wall_s;
    entries.push_back(std::move(e));
  }
  const json j{{"suite", suite_name_}, {"entries", std::move(entries)}};
  return write_file_atomic(dir / kSuiteStateJson, j.dump(2) + "\n");
}

bool same_flags(const EntryState& state, const SuiteEntry& entry) {
  return state.args == entry.args && state.eval_args == entry.eval_args;
}

bool SuiteState::done(const SuiteEntry& entry) const {
  const EntryState* s = find(entry.name);
  return s != nullptr && same_flags(*s, entry) && (s->status == "ok" || s->status == "failed");
}

const EntryState* SuiteState::find(const std::string& name) const {
  for (const auto& [n, s] : entries_) {
    if (n == name) return &s;
  }
  return nullptr;
}

void SuiteState::record(const std::string& name, EntryState state) {
  for (auto& [n, s] : entries_) {
    if (n == name) {
      s = std::move(state);
      return;
    }
  }
  entries_.emplace_back(name, std::move(state));
}

}  // namespace ib
