// Suite files: YAML -> expanded entries (models x dtypes x workloads), each a list of run flags.
#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "core/fs.h"
#include "suite/suite.h"

namespace ib {
namespace {

// Flags in the order they were set; a later value replaces an earlier one in place.
using FlagMap = std::vector<std::pair<std::string, std::string>>;
inline constexpr const char* kBareFlag = "\x01true";

void set_flag(FlagMap& flags, const std::string& key, const std::string& value) {
  for (auto& [k, v] : flags) {
    if (k == key) {
      v = value;
      return;
    }
  }
  flags.emplace_back(key, value);
}

std::string flag_name(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return key;
}

bool is_reserved(const std::string& key) {
  static const std::set<std::string> kReserved = {"name",      "model",         "models",
                                                  "dtype",     "dtypes",        "workload",
                                                  "workloads", "allow_failure", "eval"};
  return kReserved.count(key) > 0;
}

// One key: value of a flags map (true: a bare flag, false: omitted).
Status add_scalar_flag(const std::string& key, const YAML::Node& value, const std::string& where,
                       FlagMap& flags) {
  if (!value.IsScalar()) {
    return user_error(fmt::format("{}: {} must be a single value, not a list or map", where, key));
  }
  const std::string text = value.as<std::string>();
  bool b = false;
  if (YAML::convert<bool>::decode(value, b) && text != "0" && text != "1") {
    set_flag(flags, flag_name(key), b ? kBareFlag : "");
  } else {
    set_flag(flags, flag_name(key), text);
  }
  return Ok{};
}

// The run flags of a YAML map (reserved keys skipped). Suites manage the result directory.
Status read_flags(const YAML::Node& map, const std::string& where, FlagMap& flags) {
  for (const auto& kv : map) {
    const std::string key = flag_name(kv.first.as<std::string>());
    if (is_reserved(kv.first.as<std::string>())) continue;
    if (key == "result-dir" || key == "overwrite" || key == "from") {
      return user_error(
          fmt::format("{}: {} is set by the suite (DIR/<entry name>); drop it from the suite file",
                      where, kv.first.as<std::string>()));
    }
    IB_TRY(add_scalar_flag(kv.first.as<std::string>(), kv.second, where, flags));
  }
  return Ok{};
}

std::vector<std::string> to_args(const FlagMap& flags) {
  std::vector<std::string> args;
  for (const auto& [k, v] : flags) {
    if (v.empty()) continue;  // false
    args.push_back("--" + k);
    if (v != kBareFlag) args.push_back(v);
  }
  return args;
}

// eval: true (eval's defaults), false (none), or a map of `inferbench eval` flags; the ones the
// entry's run decides (model, device, dtype, weights, seed, quantization, the JSON) are refused.
Result<std::optional<std::vector<std::string>>> read_eval(const YAML::Node& node,
                                                          const std::string& where) {
  bool on = false;
  if (node.IsScalar() && YAML::convert<bool>::decode(node, on)) {
    return on ? std::optional(std::vector<std::string>{}) : std::nullopt;
  }
  if (!node.IsMap()) {
    return user_error(fmt::format(
        "{}: eval is true, false or a map of `inferbench eval` flags (e.g. text: FILE)", where));
  }
  static const std::set<std::string> kFromRun = {
      "model", "device", "dtype", "load-format", "seed", "quantization", "output-json"};
  FlagMap flags;
  for (const auto& kv : node) {
    const std::string key = flag_name(kv.first.as<std::string>());
    if (kFromRun.count(key) > 0) {
      return user_error(fmt::format(
          "{}: eval: {} comes from the entry's run flags; drop it from eval", where, key));
    }
    IB_TRY(add_scalar_flag(kv.first.as<std::string>(), kv.second, where + ": eval", flags));
  }
  return std::optional(to_args(flags));
}

std::string sanitize(const std::string& name) {
  std::string out;
  for (char c : name) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    out += ok ? c : '-';
  }
  return out;
}

Result<std::vector<std::string>> string_list(const YAML::Node& entry, const char* one,
                                             const char* many, const std::string& where) {
  std::vector<std::string> out;
  if (entry[one] && entry[many]) {
    return user_error(fmt::format("{}: give {} or {}, not both", where, one, many));
  }
  if (entry[one]) {
    if (!entry[one].IsScalar()) {
      return user_error(fmt::format("{}: {} is one value; use {} for a list", where, one, many));
    }
    out.push_back(entry[one].as<std::string>());
  }
  if (entry[many]) {
    if (!entry[many].IsSequence() || entry[many].size() == 0) {
      return user_error(fmt::format("{}: {} must be a non-empty list", where, many));
    }
    for (const auto& v : entry[many]) out.push_back(v.as<std::string>());
  }
  return out;
}

struct Workload {
  std::string name;
  YAML::Node flags;
};

// What every entry starts from: the defaults map.
struct EntryDefaults {
  FlagMap flags;
  bool allow_failure = false;
  std::optional<std::vector<std::string>> eval_args;
};

Result<std::vector<SuiteEntry>> expand_entry(const YAML::Node& node, const EntryDefaults& base,
                                             const std::string& where) {
  const FlagMap& defaults = base.flags;
  bool allow_failure = base.allow_failure;
  std::optional<std::vector<std::string>> eval_args = base.eval_args;
  if (node.IsMap() && node["eval"]) {
    IB_ASSIGN_OR_RETURN(eval_args, read_eval(node["eval"], where));
  }
  if (!node.IsMap()) return user_error(fmt::format("{}: an entry is a map of keys", where));
  IB_ASSIGN_OR_RETURN(auto models, string_list(node, "model", "models", where));
  if (models.empty()) {
    auto it = std::find_if(defaults.begin(), defaults.end(),
                           [](const auto& kv) { return kv.first == "model"; });
    if (it == defaults.end()) {
      return user_error(fmt::format("{}: no model; add model: NAME or models: [A, B]", where));
    }
    models.push_back(it->second);
  }
  IB_ASSIGN_OR_RETURN(const auto dtypes, string_list(node, "dtype", "dtypes", where));
  std::vector<Workload> workloads;
  const YAML::Node wl = node["workloads"] ? node["workloads"] : node["workload"];
  if (node["workload"] && node["workloads"]) {
    return user_error(fmt::format("{}: give workload or workloads, not both", where));
  }
  if (wl) {
    std::vector<YAML::Node> items;
    if (wl.IsMap()) items.push_back(wl);
    if (wl.IsSequence()) {
      for (const auto& w : wl) items.push_back(w);
    }
    if (items.empty()) {
      return user_error(fmt::format("{}: workloads must be a map or a list of maps", where));
    }
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].IsMap()) {
        return user_error(fmt::format("{}: workload {} must be a map of run flags", where, i + 1));
      }
      const std::string name =
          items[i]["name"] ? items[i]["name"].as<std::string>() : fmt::format("w{}", i + 1);
      workloads.push_back({name, items[i]});
    }
  }
  FlagMap entry_flags = defaults;
  IB_TRY(read_flags(node, where, entry_flags));
  const std::string prefix = node["name"] ? node["name"].as<std::string>() : "";
  if (node["allow_failure"]) allow_failure = node["allow_failure"].as<bool>();

  std::vector<SuiteEntry> out;
  for (const auto& model : models) {
    for (size_t d = 0; d < std::max<size_t>(1, dtypes.size()); ++d) {
      for (size_t w = 0; w < std::max<size_t>(1, workloads.size()); ++w) {
        FlagMap flags = entry_flags;
        SuiteEntry e;
        e.model = model;
        e.allow_failure = allow_failure;
        e.eval_args = eval_args;
        std::vector<std::string> parts;
        if (!prefix.empty()) parts.push_back(prefix);
        if (models.size() > 1 || prefix.empty()) parts.push_back(model);
        if (!workloads.empty()) {
          IB_TRY(read_flags(workloads[w].flags,
                            fmt::format("{}, workload {}", where, workloads[w].name), flags));
          e.workload = workloads[w].name;
          if (workloads.size() > 1 || prefix.empty()) parts.push_back(e.workload);
        }
        set_flag(flags, "model", model);
        if (!dtypes.empty()) {
          set_flag(flags, "dtype", dtypes[d]);
          if (dtypes.size() > 1) parts.push_back(dtypes[d]);
        }
        for (const auto& [k, v] : flags) {
          if (k == "dtype") e.dtype = v;
        }
        e.name = sanitize(fmt::format("{}", fmt::join(parts, "-")));
        e.args = to_args(flags);
        out.push_back(std::move(e));
      }
    }
  }
  return out;
}

}  // namespace

Result<SuiteSpec> parse_suite_yaml(const std::string& text, const std::string& source_name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return user_error(fmt::format("{}: not valid YAML ({}); fix the file", source_name, e.what()));
  }
  if (!root.IsMap() || !root["entries"] || !root["entries"].IsSequence()) {
    return user_error(fmt::format(
        "{}: a suite file is a map with an 'entries' list (and optional 'name', 'defaults')",
        source_name));
  }
  SuiteSpec spec;
  spec.name = root["name"] ? root["name"].as<std::string>()
                           : std::filesystem::path(source_name).stem().string();
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (key != "name" && key != "defaults" && key != "entries" && key != "description") {
      return user_error(
          fmt::format("{}: unknown top-level key '{}'; use name, description, defaults, entries",
                      source_name, key));
    }
  }
  EntryDefaults base;
  FlagMap& defaults = base.flags;
  if (root["defaults"]) {
    if (!root["defaults"].IsMap()) {
      return user_error(fmt::format("{}: defaults must be a map of run flags", source_name));
    }
    for (const auto& kv : root["defaults"]) {
      const std::string key = kv.first.as<std::string>();
      if (key == "model" && kv.second.IsScalar()) {
        set_flag(defaults, "model", kv.second.as<std::string>());
      } else if (key == "dtype" && kv.second.IsScalar()) {
        set_flag(defaults, "dtype", kv.second.as<std::string>());
      }
    }
    IB_TRY(read_flags(root["defaults"], source_name + ": defaults", defaults));
    try {
      if (root["defaults"]["allow_failure"]) {
        base.allow_failure = root["defaults"]["allow_failure"].as<bool>();
      }
    } catch (const YAML::Exception& e) {
      return user_error(fmt::format("{}: defaults: allow_failure is true or false", source_name));
    }
    if (root["defaults"]["eval"]) {
      IB_ASSIGN_OR_RETURN(base.eval_args,
                          read_eval(root["defaults"]["eval"], source_name + ": defaults"));
    }
  }
  size_t index = 0;
  for (const auto& node : root["entries"]) {
    ++index;
    const std::string where = fmt::format("{}: entry {}", source_name, index);
    try {
      IB_ASSIGN_OR_RETURN(auto entries, expand_entry(node, base, where));
      for (auto& e : entries) spec.entries.push_back(std::move(e));
    } catch (const YAML::Exception& e) {
      return user_error(fmt::format("{}: {}", where, e.what()));
    }
  }
  if (spec.entries.empty()) {
    return user_error(fmt::format("{}: the entries list is empty; add an entry", source_name));
  }
  std::map<std::string, int> seen;
  std::vector<std::string> dups;
  for (const auto& e : spec.entries) {
    if (++seen[e.name] == 2) dups.push_back(e.name);
  }
  if (!dups.empty()) {
    return user_error(
        fmt::format("{}: entry names collide ({}); give the entries distinct 'name' keys",
                    source_name, fmt::join(dups, ", ")));
  }
  return spec;
}

// The file flags of args (--dataset-path, --text, and the paths of --lora-modules'
// comma-separated name=path items) given as relative paths, made relative to dir; and --model
// where it names a directory relative to dir (a checkpoint beside the suite file; a preset's or
// an HF repo id's name is left as it is).
void resolve_file_flags(std::vector<std::string>& args, const std::filesystem::path& dir) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if ((args[i] == "--dataset-path" || args[i] == "--text") &&
        std::filesystem::path(args[i + 1]).is_relative()) {
      args[i + 1] = (dir / args[i + 1]).lexically_normal().string();
    }
    if (args[i] == "--model" && std::filesystem::path(args[i + 1]).is_relative()) {
      std::error_code ec;
      const std::filesystem::path beside = dir / args[i + 1];
      if (std::filesystem::is_directory(beside, ec))
        args[i + 1] = beside.lexically_normal().string();
    }
    for (size_t j = i + 1;
         args[i] == "--lora-modules" && j < args.size() && args[j].rfind("--", 0) != 0; ++j) {
      std::string resolved;
      size_t begin = 0;
      while (begin <= args[j].size()) {
        const size_t end = std::min(args[j].find(',', begin), args[j].size());
        const std::string item = args[j].substr(begin, end - begin);
        const size_t eq = item.find('=');
        std::string path = eq == std::string::npos ? "" : item.substr(eq + 1);
        if (!path.empty() && std::filesystem::path(path).is_relative()) {
          path = (dir / path).lexically_normal().string();
        }
        resolved += (begin == 0 ? "" : ",") +
                    (eq == std::string::npos ? item : item.substr(0, eq + 1) + path);
        begin = end + 1;
      }
      args[j] = resolved;
    }
  }
}

Result<SuiteSpec> load_suite_file(const std::filesystem::path& path) {
  auto text = read_file(path);
  if (!text.ok()) {
    return user_error(fmt::format("suite file {} cannot be read; check the path", path.string()));
  }
  IB_ASSIGN_OR_RETURN(SuiteSpec spec, parse_suite_yaml(*text, path.string()));
  const std::filesystem::path dir = path.parent_path();
  for (SuiteEntry& e : spec.entries) {
    resolve_file_flags(e.args, dir);
    if (e.eval_args) resolve_file_flags(*e.eval_args, dir);
  }
  return spec;
}

Status apply_override(std::vector<SuiteEntry>& entries, const std::string& key_value) {
  const size_t eq = key_value.find('=');
  if (eq == std::string::npos || eq == 0) {
    return user_error(
        fmt::format("--override {}: write KEY=VALUE, e.g. num_prompts=16", key_value));
  }
  const std::string flag = "--" + flag_name(key_value.substr(0, eq));
  const std::string value = key_value.substr(eq + 1);  // empty: a bare flag
  if (flag == "--result-dir" || flag == "--overwrite" || flag == "--from") {
    return user_error(fmt::format("--override {}: the suite sets {} itself", key_value, flag));
  }
  for (auto& e : entries) {
    std::vector<std::string> args;
    for (size_t i = 0; i < e.args.size(); ++i) {
      if (e.args[i] != flag) {
        args.push_back(e.args[i]);
        continue;
      }
      const bool has_value = i + 1 < e.args.size() && e.args[i + 1].rfind("--", 0) != 0;
      if (has_value) ++i;  // drop the old value with its flag
    }
    args.push_back(flag);
    if (!value.empty()) args.push_back(value);
    if (flag == "--model") e.model = value;
    if (flag == "--dtype") e.dtype = value;
    e.args = std::move(args);
  }
  return Ok{};
}

Result<std::vector<SuiteEntry>> select_models(const std::vector<SuiteEntry>& entries,
                                              const std::string& model_list) {
  if (model_list.empty()) return entries;
  std::vector<std::string> wanted;
  size_t start = 0;
  while (start <= model_list.size()) {
    const size_t comma = std::min(model_list.find(',', start), model_list.size());
    if (comma > start) wanted.push_back(model_list.substr(start, comma - start));
    start = comma + 1;
  }
  std::vector<std::string> models;
  for (const auto& e : entries) {
    if (std::find(models.begin(), models.end(), e.model) == models.end()) {
      models.push_back(e.model);
    }
  }
  std::vector<std::string> unknown;
  for (const auto& w : wanted) {
    if (std::find(models.begin(), models.end(), w) == models.end()) unknown.push_back(w);
  }
  if (!unknown.empty() || wanted.empty()) {
    return user_error(
        fmt::format("--model-list: {} not in the suite; its models are: {}",
                    wanted.empty() ? "empty list" : fmt::format("{}", fmt::join(unknown, ", ")),
                    fmt::join(models, ", ")));
  }
  std::vector<SuiteEntry> out;
  for (const auto& e : entries) {
    if (std::find(wanted.begin(), wanted.end(), e.model) != wanted.end()) out.push_back(e);
  }
  return out;
}

}  // namespace ib
