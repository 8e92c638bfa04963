// The suite state file: which entries finished, how, and with which arguments.
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "core/fs.h"
#include "suite/suite.h"

namespace ib {

using nlohmann::json;

namespace {

json entry_json(const std::string& name, const EntryState& s) {
  json e{{"name", name}, {"status", s.status}, {"error", s.error}, {"args", s.args}};
  if (s.eval_args) e["eval_args"] = *s.eval_args;
  e["wall_s"] = s.wall_s;
  return e;
}

// An entry record's name and state; nullopt when it lacks name, status or args.
std::optional<std::pair<std::string, EntryState>> entry_from_json(const json& e) {
  if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("status") ||
      !e["status"].is_string() || !e.contains("args") || !e["args"].is_array()) {
    return std::nullopt;
  }
  EntryState s;
  s.status = e["status"].get<std::string>();
  s.error = e.value("error", "");
  for (const auto& a : e["args"]) {
    if (!a.is_string()) return std::nullopt;
    s.args.push_back(a.get<std::string>());
  }
  if (e.contains("eval_args") && e["eval_args"].is_array()) {
    s.eval_args = std::vector<std::string>();
    for (const auto& a : e["eval_args"]) {
      if (!a.is_string()) return std::nullopt;
      s.eval_args->push_back(a.get<std::string>());
    }
  }
  s.wall_s = e.contains("wall_s") && e["wall_s"].is_number() ? e["wall_s"].get<double>() : 0.0;
  return std::make_pair(e["name"].get<std::string>(), std::move(s));
}

}  // namespace

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
    auto entry = entry_from_json(e);
    if (!entry) return bad("an entry lacks name, status or args");
    state.record(entry->first, std::move(entry->second));
  }
  return state;
}

Status SuiteState::save(const std::filesystem::path& dir) const {
  json entries = json::array();
  for (const auto& [name, s] : entries_) entries.push_back(entry_json(name, s));
  const json j{{"suite", suite_name_}, {"entries", std::move(entries)}};
  return write_file_atomic(dir / kSuiteStateJson, j.dump(2) + "\n");
}

Status save_entry_state(const std::filesystem::path& dir, const std::string& name,
                        const EntryState& state) {
  std::error_code ec;
  std::filesystem::create_directories(dir / name, ec);
  if (ec) {
    return runtime_error(fmt::format("cannot create {}: {}", (dir / name).string(), ec.message()));
  }
  return write_file_atomic(dir / name / kEntryStateJson, entry_json(name, state).dump(2) + "\n");
}

Result<std::optional<EntryState>> load_entry_state(const std::filesystem::path& dir,
                                                   const std::string& name) {
  const auto path = dir / name / kEntryStateJson;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<EntryState>();
  IB_ASSIGN_OR_RETURN(const std::string text, read_file(path));
  auto entry = entry_from_json(json::parse(text, nullptr, false));
  if (!entry || entry->first != name) {
    return user_error(fmt::format(
        "{}: not the entry state of '{}'; delete it to run the entry again", path.string(), name));
  }
  return std::optional<EntryState>(std::move(entry->second));
}

bool same_flags(const EntryState& state, const SuiteEntry& entry) {
  return state.args == entry.args && state.eval_args == entry.eval_args;
}

bool SuiteState::done(const SuiteEntry& entry, bool retry_failed) const {
  const EntryState* s = find(entry.name);
  return s != nullptr && same_flags(*s, entry) &&
         (s->status == "ok" || (s->status == "failed" && !retry_failed));
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
