// `inferbench suite`: runs each planned entry into DIR/<entry>/, keeps the state file for
// resuming, then writes the leaderboard and the cross-entry memory heatmap.
#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "core/clock.h"
#include "core/fs.h"
#include "model/presets.h"
#include "orchestrate/orchestrate.h"
#include "report/report.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kHeatmapFrames = 120;  // as `inferbench plot`'s default

std::string inline_svg(const fs::path& file) {
  auto text = read_file(file);
  if (!text.ok()) return "";
  const size_t start = text->find("<svg");
  return start == std::string::npos ? "" : text->substr(start);
}

}  // namespace

// The state to continue from: DIR's state file, a fresh one, or a user error.
Result<SuiteState> open_suite_state(const fs::path& dir, const std::string& name, bool resume) {
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
  return SuiteState(name);
}

// leaderboard.md/.csv/.html and heatmap.svg/.html; the Markdown on stdout.
Status write_suite_report(const fs::path& dir, const std::string& name,
                          const std::vector<SuiteEntry>& entries, const SuiteState& state) {
  std::vector<LeaderboardRow> rows;
  std::vector<std::string> plotted;
  for (const auto& e : entries) {
    json result = nullptr;
    if (auto text = read_file(dir / e.name / kResultJson); text.ok()) {
      result = json::parse(*text, nullptr, false);
      if (result.is_discarded()) result = nullptr;
    }
    json eval = nullptr;
    if (auto text = read_file(dir / e.name / kEvalJson); text.ok() && e.eval_args) {
      eval = json::parse(*text, nullptr, false);
      if (eval.is_discarded()) eval = nullptr;
    }
    const EntryState* s = state.find(e.name);
    const bool other_flags = s != nullptr && !same_flags(*s, e);  // an older run, or --override
    if (other_flags) s = nullptr;
    auto model = resolve_model(e.model);
    rows.push_back(leaderboard_row(e, s, result, eval, model.ok() ? model->parameter_count() : 0));
    if (other_flags) rows.back().status = "ran with other flags (the --override it ran with?)";
    std::error_code ec;
    if (s != nullptr && s->status == "ok" && fs::exists(dir / e.name / kMemoryCsv, ec)) {
      plotted.push_back((dir / e.name).string());
    }
  }
  rank_rows(rows);
  std::string svg;
  if (!plotted.empty()) {
    for (const char* file : {"heatmap.svg", "heatmap.html"}) {
      const Status written = write_memory_heatmap(plotted, (dir / file).string(), kHeatmapFrames);
      if (!written.ok()) {
        std::fprintf(stderr, "inferbench: suite: %s not written: %s\n", file,
                     written.error().message.c_str());
      }
    }
    svg = inline_svg(dir / "heatmap.svg");
  }
  const std::string title = fmt::format("inferbench suite {}: {} entries", name, rows.size());
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

EntryState run_suite_entry(const SuitePlan& suite, size_t i, const PluginRegistry& registry,
                           const std::atomic<bool>& stop, const RunProgress& progress) {
  const SuiteEntry& e = suite.entries[i].entry;
  const size_t n = suite.entries.size();
  const fs::path& dir = suite.dir;
  EntryState s;
  s.args = e.args;
  s.eval_args = e.eval_args;
  if (!suite.entries[i].plan) {
    s.status = "failed";
    s.error = "not run: " + suite.entries[i].invalid;
    std::fprintf(stderr, "inferbench: suite entry %zu/%zu %s: %s\n", i + 1, n, e.name.c_str(),
                 s.error.c_str());
    return s;
  }
  std::fprintf(stderr, "inferbench: suite entry %zu/%zu %s: running\n", i + 1, n, e.name.c_str());
  const int64_t start_ns = now_ns();
  std::error_code ec;
  fs::remove(dir / e.name / kEvalJson, ec);  // never an earlier eval's numbers beside this run
  auto code = execute_run(*suite.entries[i].plan, registry, stop, progress);
  if (code.ok() && *code == Outcome::kOk && !stop.load() && e.eval_args && suite.run_eval) {
    std::fprintf(stderr, "inferbench: suite entry %zu/%zu %s: eval\n", i + 1, n, e.name.c_str());
    if (Status evaluated = suite.run_eval(e, dir / e.name / kEvalJson); !evaluated.ok()) {
      code = Error{evaluated.error().kind, "eval: " + evaluated.error().message};
    }
  }
  s.wall_s = static_cast<double>(now_ns() - start_ns) / 1e9;
  if (!code.ok()) {
    s.status = "failed";
    s.error = code.error().message;
    std::fprintf(stderr, "inferbench: suite entry %zu/%zu %s failed: %s\n", i + 1, n,
                 e.name.c_str(), s.error.c_str());
  } else if (*code == Outcome::kInterrupted || stop.load()) {
    s.status = "interrupted";
  } else {
    s.status = "ok";
    std::fprintf(stderr, "inferbench: suite entry %zu/%zu %s: done in %.1f s\n", i + 1, n,
                 e.name.c_str(), s.wall_s);
  }
  return s;
}

Result<Outcome> execute_suite(const SuitePlan& suite, SuiteState state,
                              const PluginRegistry& registry, const std::atomic<bool>& stop,
                              const RunProgress& progress) {
  std::error_code ec;
  fs::create_directories(suite.dir, ec);
  if (ec) {
    return runtime_error(fmt::format("cannot create {}: {}", suite.dir.string(), ec.message()));
  }
  IB_TRY(state.save(suite.dir));

  const std::vector<SuiteEntryPlan>& planned = suite.entries;
  const fs::path& dir = suite.dir;
  const size_t n = planned.size();
  int failed = 0;
  bool interrupted = false;
  for (size_t i = 0; i < n && !interrupted; ++i) {
    const SuiteEntry& e = planned[i].entry;
    if (state.done(e, suite.retry_failed)) {
      const EntryState* s = state.find(e.name);
      std::fprintf(stderr, "inferbench: suite entry %zu/%zu %s: %s earlier, skipped\n", i + 1, n,
                   e.name.c_str(), s->status.c_str());
      failed += s->status == "failed" && !e.allow_failure ? 1 : 0;
      continue;
    }
    EntryState s = run_suite_entry(suite, i, registry, stop, progress);
    if (s.status == "failed") failed += e.allow_failure ? 0 : 1;
    interrupted = s.status == "interrupted";
    state.record(e.name, std::move(s));
    IB_TRY(state.save(dir));
  }
  std::vector<SuiteEntry> entries;
  for (const auto& p : planned) entries.push_back(p.entry);
  IB_TRY(write_suite_report(dir, suite.name, entries, state));
  if (interrupted) {
    std::fprintf(stderr, "inferbench: suite interrupted; rerun the same command to resume\n");
    return Outcome::kInterrupted;
  }
  if (failed > 0) {
    std::fprintf(stderr, "inferbench: suite: %d of %zu entries failed (see the leaderboard)\n",
                 failed, n);
    return Outcome::kFailed;
  }
  return Outcome::kOk;
}

}  // namespace ib
