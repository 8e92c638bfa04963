// `inferbench compare A B`: result directories, result.json files, or two suite directories
// (compared entry by entry). Markdown on stdout; exit 1 on a significant regression.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/suite_commands.h"
#include "compare/compare.h"
#include "core/fs.h"
#include "report/result_dir.h"
#include "suite/suite.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

Result<json> load_result(const fs::path& path) {
  std::error_code ec;
  const fs::path file = fs::is_directory(path, ec) ? path / kResultJson : path;
  auto text = read_file(file);
  if (!text.ok()) {
    return user_error(fmt::format(
        "{}: no result to read; pass a result directory, a result.json or a suite directory",
        file.string()));
  }
  json j = json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("config") || !j.contains("spread")) {
    return user_error(
        fmt::format("{}: not an inferbench result.json (no config or spread); pass one written by "
                    "inferbench run",
                    file.string()));
  }
  return j;
}

bool is_suite_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec) && fs::exists(p / kSuiteStateJson, ec);
}

// Pairs of (label, A result, B result): one pair, or the entries both suites finished.
Result<std::vector<std::tuple<std::string, json, json>>> pairs_of(const CompareFlags& f) {
  std::vector<std::tuple<std::string, json, json>> out;
  const bool sa = is_suite_dir(f.a);
  const bool sb = is_suite_dir(f.b);
  if (sa != sb) {
    return user_error(
        fmt::format("{} is a suite directory and {} is not; compare two suites or "
                    "two results",
                    sa ? f.a : f.b, sa ? f.b : f.a));
  }
  if (!sa) {
    IB_ASSIGN_OR_RETURN(json a, load_result(f.a));
    IB_ASSIGN_OR_RETURN(json b, load_result(f.b));
    out.emplace_back("", std::move(a), std::move(b));
    return out;
  }
  std::vector<std::string> only;
  for (const auto& entry : fs::directory_iterator(f.a)) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename().string();
    std::error_code ec;
    if (!fs::exists(entry.path() / kResultJson, ec)) continue;
    if (!fs::exists(fs::path(f.b) / name / kResultJson, ec)) {
      only.push_back(name);
      continue;
    }
    IB_ASSIGN_OR_RETURN(json a, load_result(entry.path()));
    IB_ASSIGN_OR_RETURN(json b, load_result(fs::path(f.b) / name));
    out.emplace_back(name, std::move(a), std::move(b));
  }
  std::sort(out.begin(), out.end(),
            [](const auto& x, const auto& y) { return std::get<0>(x) < std::get<0>(y); });
  if (!only.empty()) {
    std::fprintf(stderr, "inferbench: compare: only in %s: %s\n", f.a.c_str(),
                 fmt::format("{}", fmt::join(only, ", ")).c_str());
  }
  if (out.empty()) {
    return user_error(fmt::format("suites {} and {} have no finished entry in common", f.a, f.b));
  }
  return out;
}

Status write_output(const std::string& path, const std::string& text) {
  if (path.empty()) return Ok{};
  const auto parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);
  return write_file_atomic(path, text);
}

}  // namespace

void add_compare_flags(CLI::App& app, CompareFlags& f) {
  app.add_option("a", f.a, "baseline: result directory, result.json or suite directory")
      ->required();
  app.add_option("b", f.b, "candidate: the same kind as A")->required();
  app.add_option("--threshold", f.threshold,
                 "relative change that counts as a regression (when also p < 0.05)")
      ->capture_default_str();
  app.add_flag("--force", f.force, "compare results of different workloads");
  app.add_flag("--allow-switch-diff", f.allow_switch_diff,
               "compare results whose kernel switches (IB_PDL, IB_FUSED, ...) differ");
  app.add_option("--json", f.json_out, "also write the comparison as JSON here");
  app.add_option("--markdown", f.markdown_out, "also write the Markdown here");
}

Result<int> execute_compare(const CompareFlags& f) {
  IB_ASSIGN_OR_RETURN(const double threshold, parse_fraction(f.threshold, "--threshold"));
  IB_ASSIGN_OR_RETURN(const auto pairs, pairs_of(f));
  std::vector<Comparison> comparisons;
  std::vector<std::string> refused;
  std::vector<std::string> refused_switches;
  for (const auto& [name, a, b] : pairs) {
    Comparison c = compare_results(a, b, threshold);
    c.a_name = name.empty() ? f.a : fmt::format("{}/{}", f.a, name);
    c.b_name = name.empty() ? f.b : fmt::format("{}/{}", f.b, name);
    if (!c.workload_differences.empty() && !f.force) {
      refused.push_back(fmt::format("{}{}", name.empty() ? "" : name + ": ",
                                    fmt::join(c.workload_differences, "; ")));
    }
    if (c.switches_refuse() && !f.allow_switch_diff) {
      std::vector<std::string> lines;
      for (const auto& d : c.switch_differences) {
        if (d.refuses) lines.push_back(switch_difference_text(d));
      }
      refused_switches.push_back(
          fmt::format("{}{}", name.empty() ? "" : name + ": ", fmt::join(lines, "; ")));
    }
    comparisons.push_back(std::move(c));
  }
  if (!refused.empty()) {
    return user_error(fmt::format(
        "the results are of different workloads ({}); compare like with like or pass --force",
        fmt::join(refused, " | ")));
  }
  if (!refused_switches.empty()) {
    return user_error(fmt::format(
        "the results ran different kernels: their kernel switches differ ({}); rerun with the same "
        "IB_* switches, or pass --allow-switch-diff to compare them anyway",
        fmt::join(refused_switches, " | ")));
  }
  std::string md;
  json out = json::array();
  int regressions = 0;
  for (const auto& c : comparisons) {
    md += (md.empty() ? "" : "\n") + comparison_markdown(c);
    out.push_back(comparison_json(c));
    regressions += c.regressions();
  }
  std::cout << md << std::flush;
  IB_TRY(write_output(f.markdown_out, md));
  IB_TRY(write_output(f.json_out,
                      (comparisons.size() == 1 ? out[0] : json{{"entries", out}}).dump(2) + "\n"));
  return regressions > 0 ? kExitRuntime : kExitOk;
}

}  // namespace ib
