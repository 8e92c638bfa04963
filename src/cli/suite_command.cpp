// `inferbench suite FILE.yaml`: validate every entry, run each as `inferbench run` into
// DIR/<entry>/, keep a state file for resuming, then the leaderboard and the memory heatmap.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/suite_commands.h"
#include "core/clock.h"
#include "core/fs.h"
#include "model/presets.h"
#include "report/report.h"
#include "suite/suite.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Planned {
  SuiteEntry entry;
  std::optional<RunPlan> plan;  // nullopt: cannot run here (allow_failure entries only)
  std::string invalid;          // why not
};

// Every entry resolved as `inferbench run` would resolve it; all bad ones reported together
// (those with allow_failure are kept, to be recorded as not run).
Result<std::vector<Planned>> validate_entries(const std::vector<SuiteEntry>& entries,
                                              const fs::path& dir, const PluginRegistry& registry) {
  std::vector<Planned> out;
  std::vector<std::string> problems;
  for (const auto& e : entries) {
    auto flags = parse_run_args(e.args);
    std::string problem;
    if (flags.ok()) {
      flags->result_dir = (dir / e.name).string();
      flags->overwrite = true;  // the suite owns DIR/<entry>: a rerun replaces a partial result
      auto plan = resolve_run(*flags, registry);
      if (plan.ok()) {
        out.push_back({e, std::move(*plan), ""});
        continue;
      }
      problem = plan.error().message;
    } else {
      problem = flags.error().message;
    }
    if (e.allow_failure) {
      out.push_back({e, std::nullopt, problem});
    } else {
      problems.push_back(fmt::format("{}: {}", e.name, problem));
    }
  }
  if (!problems.empty()) {
    for (const auto& p : problems) std::fprintf(stderr, "inferbench: suite entry %s\n", p.c_str());
    return user_error(
        fmt::format("{} of {} suite entries cannot run (above); fix or remove them, mark them "
                    "allow_failure: true, or pick others with --model-list",
                    problems.size(), entries.size()));
  }
  return out;
}

// The state to continue from: DIR's state file, a fresh one, or a user error.
Result<SuiteState> open_state(const fs::path& dir, const SuiteSpec& spec, bool resume) {
  std::error_code ec;
  const bool has_state = fs::exists(dir / kSuiteStateJson, ec);
  if (has_state) return SuiteState::load(dir);
  if (resume) {
    return user_error(fmt::format("--resume: {} has no {}; drop --resume to start the suite",
                                  dir.string(), kSuiteStateJson));
  }
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec)) {
    return user_error(
        fmt::format("--result-dir {} is not empty and holds no suite state; choose a new directory",
                    dir.string()));
  }
  IB_TRY(check_writable_dir(dir));
  return SuiteState(spec.name);
}

std::string inline_svg(const fs::path& file) {
  auto text = read_file(file);
  if (!text.ok()) return "";
  const size_t start = text->find("<svg");
  return start == std::string::npos ? "" : text->substr(start);
}

// leaderboard.md/.csv/.html and heatmap.svg/.html; the Markdown on stdout.
Status write_leaderboard(const fs::path& dir, const SuiteSpec& spec,
                         const std::vector<SuiteEntry>& entries, const SuiteState& state) {
  std::vector<LeaderboardRow> rows;
  PlotFlags plot;
  for (const auto& e : entries) {
    json result = nullptr;
    if (auto text = read_file(dir / e.name / kResultJson); text.ok()) {
      result = json::parse(*text, nullptr, false);
      if (result.is_discarded()) result = nullptr;
    }
    const EntryState* s = state.find(e.name);
    if (s != nullptr && s->args != e.args) s = nullptr;  // an older run with other flags
    auto model = resolve_model(e.model);
    rows.push_back(leaderboard_row(e, s, result, model.ok() ? model->parameter_count() : 0));
    std::error_code ec;
    if (s != nullptr && s->status == "ok" && fs::exists(dir / e.name / kMemoryCsv, ec)) {
      plot.dirs.push_back((dir / e.name).string());
    }
  }
  rank_rows(rows);
  std::string svg;
  if (!plot.dirs.empty()) {
    for (const char* name : {"heatmap.svg", "heatmap.html"}) {
      plot.out = (dir / name).string();
      auto code = execute_plot(plot);
      if (!code.ok()) {
        std::fprintf(stderr, "inferbench: suite: %s not written: %s\n", name,
                     code.error().message.c_str());
      }
    }
    svg = inline_svg(dir / "heatmap.svg");
  }
  const std::string title = fmt::format("inferbench suite {}: {} entries", spec.name, rows.size());
  const std::string md = leaderboard_markdown(rows, title);
  IB_TRY(write_file_atomic(dir / "leaderboard.md", md));
  IB_TRY(write_file_atomic(dir / "leaderboard.csv", leaderboard_csv(rows)));
  IB_TRY(write_file_atomic(dir / "leaderboard.html", leaderboard_html(rows, title, svg)));
  std::cout << "\n"
            << md << "\nLeaderboard: " << (dir / "leaderboard.md").string() << " (.csv, .html)"
            << (svg.empty() ? "" : "; memory heatmap: heatmap.svg, .html") << "\n"
            << std::flush;
  return Ok{};
}

}  // namespace

void add_suite_flags(CLI::App& app, SuiteFlags& f) {
  app.add_option("file", f.file, "suite file (YAML): defaults + entries")->required();
  app.add_option("--model-list", f.model_list, "only the entries of these models: a,b");
  app.add_option("--result-dir", f.result_dir, "default: results/<suite name>");
  app.add_option("--override", f.overrides,
                 "KEY=VALUE run flag applied to every entry (repeatable), e.g. num_prompts=16 "
                 "for a reduced dry run");
  app.add_flag("--dry-run", f.dry_run,
               "validate every entry and print its `inferbench run` arguments; run nothing");
  app.add_flag("--report-only", f.report_only,
               "rebuild the leaderboard and heatmap from --result-dir's finished entries (on any "
               "machine: nothing is validated or run); entries not finished show as not run");
  app.add_flag("--resume", f.resume,
               "continue the suite in --result-dir (the default when it holds a suite state)");
}

Result<int> execute_suite(const SuiteFlags& flags, const PluginRegistry& registry,
                          const std::atomic<bool>& stop) {
  IB_ASSIGN_OR_RETURN(const SuiteSpec spec, load_suite_file(flags.file));
  IB_ASSIGN_OR_RETURN(auto entries, select_models(spec.entries, flags.model_list));
  for (const auto& o : flags.overrides) IB_TRY(apply_override(entries, o));
  const fs::path dir =
      flags.result_dir.empty() ? fs::path("results") / spec.name : fs::path(flags.result_dir);
  if (flags.dry_run) {
    IB_ASSIGN_OR_RETURN(const auto checked, validate_entries(entries, dir, registry));
    for (size_t i = 0; i < checked.size(); ++i) {
      const SuiteEntry& e = checked[i].entry;
      std::string line = fmt::format("{}/{} {}: ", i + 1, checked.size(), e.name);
      if (!checked[i].plan) {
        line += "not run: " + checked[i].invalid;
      } else {
        line += "inferbench run";
        for (const auto& a : e.args) line += " " + a;
        line += " --result-dir " + (dir / e.name).string();
      }
      std::cout << line << "\n";
    }
    return kExitOk;
  }
  if (flags.report_only) {
    std::error_code ec;
    if (!fs::exists(dir / kSuiteStateJson, ec)) {
      return user_error(fmt::format("--report-only: {} has no {}; run the suite into it first",
                                    dir.string(), kSuiteStateJson));
    }
    IB_ASSIGN_OR_RETURN(const SuiteState finished, SuiteState::load(dir));
    IB_TRY(write_leaderboard(dir, spec, entries, finished));
    return kExitOk;
  }
  IB_ASSIGN_OR_RETURN(SuiteState state, open_state(dir, spec, flags.resume));
  IB_ASSIGN_OR_RETURN(auto planned, validate_entries(entries, dir, registry));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return runtime_error(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  IB_TRY(state.save(dir));

  const size_t n = planned.size();
  int failed = 0;
  bool interrupted = false;
  const bool progress = ::isatty(STDERR_FILENO) == 1;
  for (size_t i = 0; i < n && !interrupted; ++i) {
    const SuiteEntry& e = planned[i].entry;
    if (state.done(e)) {
      const EntryState* s = state.find(e.name);
      std::fprintf(stderr, "inferbench: suite entry %zu/%zu %s: %s earlier, skipped\n", i + 1, n,
                   e.name.c_str(), s->status.c_str());
      failed += s->status == "failed" && !e.allow_failure ? 1 : 0;
      continue;
    }
    EntryState s;
    s.args = e.args;
    if (!planned[i].plan) {
      s.status = "failed";
      s.error = "not run: " + planned[i].invalid;
      std::fprintf(stderr, "inferbench: suite entry %zu/%zu %s: %s\n", i + 1, n, e.name.c_str(),
                   s.error.c_str());
      state.record(e.name, std::move(s));
      IB_TRY(state.save(dir));
      continue;
    }
    std::fprintf(stderr, "inferbench: suite entry %zu/%zu %s: running\n", i + 1, n, e.name.c_str());
    const int64_t start_ns = now_ns();
    auto code = execute_run(*planned[i].plan, registry, stop, progress);
    s.wall_s = static_cast<double>(now_ns() - start_ns) / 1e9;
    if (!code.ok()) {
      s.status = "failed";
      s.error = code.error().message;
      failed += e.allow_failure ? 0 : 1;
      std::fprintf(stderr, "inferbench: suite entry %zu/%zu %s failed: %s\n", i + 1, n,
                   e.name.c_str(), s.error.c_str());
    } else if (*code == kExitInterrupted || stop.load()) {
      s.status = "interrupted";
      interrupted = true;
    } else {
      s.status = "ok";
      std::fprintf(stderr, "inferbench: suite entry %zu/%zu %s: done in %.1f s\n", i + 1, n,
                   e.name.c_str(), s.wall_s);
    }
    state.record(e.name, std::move(s));
    IB_TRY(state.save(dir));
  }
  IB_TRY(write_leaderboard(dir, spec, entries, state));
  if (interrupted) {
    std::fprintf(stderr, "inferbench: suite interrupted; rerun the same command to resume\n");
    return kExitInterrupted;
  }
  if (failed > 0) {
    std::fprintf(stderr, "inferbench: suite: %d of %zu entries failed (see the leaderboard)\n",
                 failed, n);
    return kExitRuntime;
  }
  return kExitOk;
}

}  // namespace ib
