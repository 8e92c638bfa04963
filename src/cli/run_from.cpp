// `inferbench run --from result.json`: the recorded config back into `run` arguments.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "cli/suite_commands.h"
#include "core/build_info.h"
#include "core/fs.h"
#include "report/result_dir.h"

namespace ib {
namespace {

using nlohmann::json;

std::string scalar_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();  // numbers as JSON writes them: 8, 0.9, 1.0
}

// config key -> flag: "num_prompts" -> "--num-prompts".
std::string flag_of(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return "--" + key;
}

}  // namespace

Result<RunFlags> parse_run_args(const std::vector<std::string>& args) {
  CLI::App app{"run"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  RunFlags flags;
  add_run_flags(app, flags);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return user_error(fmt::format("{}; see inferbench run --help", e.what()));
  }
  return flags;
}

Result<std::vector<std::string>> args_from_config(const json& config) {
  if (!config.is_object()) return user_error("config is not an object");
  std::vector<std::string> args;
  const auto add = [&](const std::string& flag, const json& v) {
    args.push_back(flag);
    args.push_back(scalar_text(v));
  };
  for (const auto& [key, v] : config.items()) {
    if (key == "result_dir" || key == "overwrite" || key == "load_description") continue;
    if (v.is_null()) continue;
    // A repeatable flag, recorded as its list: the flag once per item.
    if (key == "slurm_arg" && v.is_array() &&
        std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); })) {
      for (const json& e : v) add(flag_of(key), e);
      continue;
    }
    if (v.is_object() || v.is_array()) {
      return user_error(fmt::format("config.{} is not a single value", key));
    }
    if (key == "telemetry" || key == "cuda_graphs" || key == "ignore_eos") {
      if (!v.is_boolean()) return user_error(fmt::format("config.{} is not true or false", key));
      static const std::map<std::string, std::string> kNegated = {
          {"telemetry", "--disable-telemetry"},
          {"cuda_graphs", "--no-cuda-graphs"},
          {"ignore_eos", "--no-ignore-eos"}};
      if (!v.get<bool>()) args.push_back(kNegated.at(key));
      continue;
    }
    if (v.is_boolean()) {
      if (v.get<bool>()) args.push_back(flag_of(key));
      continue;
    }
    if (key == "input_len" || key == "output_len") {
      const bool dist = scalar_text(v).find(':') != std::string::npos;
      add(flag_of(dist ? key + "_dist" : key), v);
      continue;
    }
    static const std::map<std::string, std::string> kRenamed = {
        {"kv_cache_memory_bytes", "--kv-cache-memory"},
        {"memory_sample_interval_ms", "--memory-sample-interval"},
        {"request_timeout_s", "--request-timeout"}};
    // 0 is what an HTTP target records (no local KV cache), not a size --kv-cache-memory takes.
    if (key == "kv_cache_memory_bytes" && v.is_number() && v.get<double>() <= 0) continue;
    if (auto it = kRenamed.find(key); it != kRenamed.end()) {
      add(it->second, v);
      continue;
    }
    add(flag_of(key), v);
  }
  return args;
}

Result<RunFlags> flags_from_result(const std::string& path,
                                   const std::vector<std::string>& overrides,
                                   json* recorded_config) {
  std::filesystem::path file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) file /= kResultJson;
  auto text = read_file(file);
  if (!text.ok()) {
    return user_error(fmt::format("--from {}: cannot read it; pass a result.json or its directory",
                                  file.string()));
  }
  const json result = json::parse(*text, nullptr, false);
  if (!result.is_object() || !result.contains("config") || !result["config"].is_object() ||
      !result["config"].contains("model")) {
    return user_error(fmt::format(
        "--from {}: not an inferbench result.json (no config object with the model); pass one "
        "written by inferbench run",
        file.string()));
  }
  auto args = args_from_config(result["config"]);
  if (!args.ok()) {
    return user_error(
        fmt::format("--from {}: malformed {}; pass a result.json written by "
                    "inferbench run",
                    file.string(), args.error().message));
  }
  const json recorded = result.value("env", json::object()).value("inferbench", json::object());
  const BuildInfo build = build_info();
  const std::string version = recorded.value("version", "?");
  const std::string sha = recorded.value("git_sha", "?");
  if (version != build.version || sha != build.git_sha) {
    std::fprintf(stderr,
                 "inferbench: warning: %s was recorded by inferbench %s (git %s), this is %s (git "
                 "%s); the configuration is the same, the code may not be\n",
                 file.string().c_str(), version.c_str(), sha.c_str(), build.version, build.git_sha);
  }
  if (recorded_config != nullptr) *recorded_config = result["config"];
  std::vector<std::string> all = *args;
  all.insert(all.end(), overrides.begin(), overrides.end());
  auto flags = parse_run_args(all);
  if (!flags.ok()) {
    return user_error(fmt::format("--from {}: {}", file.string(), flags.error().message));
  }
  return flags;
}

std::vector<std::string> config_drift(const json& recorded, const json& now,
                                      const std::vector<std::string>& overrides) {
  std::vector<std::string> out;
  for (const auto& [key, value] : recorded.items()) {
    if (key == "result_dir" || key == "overwrite") continue;
    const auto given = [&](const std::string& k) {
      return std::find(overrides.begin(), overrides.end(), flag_of(k)) != overrides.end();
    };
    if (given(key) || given(key + "_dist")) continue;
    const json other = now.contains(key) ? now[key] : json(nullptr);
    if (other != value) out.push_back(fmt::format("{}: {} vs {}", key, value.dump(), other.dump()));
  }
  return out;
}

}  // namespace ib
