// `inferbench suite --executor slurm | --array-task N | --collect` (cli/detail/suite_support.h):
// the suite as Slurm job arrays, one task per entry, each task's state in its own file, merged
// by --collect into the suite state and the leaderboard.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/detail/suite_support.h"
#include "cli/run_options.h"
#include "core/clock.h"
#include "core/fs.h"
#include "core/subprocess.h"
#include "suite/slurm.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// DIR/slurm/jobs.json: every submission, oldest first.
struct SlurmJob {
  std::string id;
  std::vector<int> indices;
};

Result<std::vector<SlurmJob>> read_jobs(const fs::path& dir) {
  const fs::path path = dir / kSlurmDir / kSlurmJobsJson;
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::vector<SlurmJob>();
  IB_ASSIGN_OR_RETURN(const std::string text, read_file(path));
  const json j = json::parse(text, nullptr, false);
  std::vector<SlurmJob> jobs;
  if (j.is_array()) {
    for (const auto& e : j) {
      if (!e.is_object() || !e.contains("job_id") || !e["job_id"].is_string() ||
          !e.contains("indices") || !e["indices"].is_array()) {
        continue;
      }
      SlurmJob job{e["job_id"].get<std::string>(), {}};
      for (const auto& i : e["indices"]) {
        if (i.is_number_integer()) job.indices.push_back(i.get<int>());
      }
      jobs.push_back(std::move(job));
    }
    return jobs;
  }
  return user_error(
      fmt::format("{}: not a list of Slurm submissions; delete it to forget them", path.string()));
}

Status append_job(const fs::path& dir, const json& record) {
  const fs::path path = dir / kSlurmDir / kSlurmJobsJson;
  json all = json::array();
  if (auto text = read_file(path); text.ok()) {
    all = json::parse(*text, nullptr, false);
    if (!all.is_array()) all = json::array();
  }
  all.push_back(record);
  return write_file_atomic(path, all.dump(2) + "\n");
}

// The latest submission's Slurm record of each entry index (scontrol show job -o), where
// scontrol is on PATH and still knows the job.
std::map<int, std::pair<std::string, SlurmTaskState>> slurm_task_states(
    const std::vector<SlurmJob>& jobs) {
  std::map<int, std::pair<std::string, SlurmTaskState>> out;
  if (jobs.empty() || !on_path("scontrol")) return out;
  for (const SlurmJob& job : jobs) {  // later submissions replace earlier ones
    const auto shown = run_command({"scontrol", "show", "job", "-o", job.id});
    if (!shown.ok() || shown->exit_code != 0) continue;
    const auto tasks = parse_scontrol_tasks(shown->output);
    for (const int i : job.indices) {
      if (const auto it = tasks.find(i); it != tasks.end()) out[i] = {job.id, it->second};
    }
  }
  return out;
}

// The latest submission that included entry index i ("" when none did).
std::string latest_job_of(const std::vector<SlurmJob>& jobs, int i) {
  std::string id;
  for (const SlurmJob& job : jobs) {
    if (std::find(job.indices.begin(), job.indices.end(), i) != job.indices.end()) id = job.id;
  }
  return id;
}

fs::path task_log(const fs::path& dir, const std::string& job, int i) {
  return fs::absolute(dir / kSlurmDir / "logs" / fmt::format("{}_{}.out", job, i));
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

Result<SuiteState> merged_suite_state(const fs::path& dir, const std::string& name,
                                      const std::vector<SuiteEntry>& entries) {
  std::error_code ec;
  const fs::path state_file = dir / kSuiteStateJson;
  SuiteState state(name);
  fs::file_time_type state_time{};
  if (fs::exists(state_file, ec)) {
    IB_ASSIGN_OR_RETURN(state, SuiteState::load(dir));
    state_time = fs::last_write_time(state_file, ec);
  }
  for (const SuiteEntry& e : entries) {
    IB_ASSIGN_OR_RETURN(const auto own, load_entry_state(dir, e.name));
    if (!own || !same_flags(*own, e)) continue;
    const EntryState* recorded = state.find(e.name);
    // A task's file counts unless the suite state recorded the entry later (a local rerun).
    const bool newer = fs::last_write_time(dir / e.name / kEntryStateJson, ec) > state_time;
    if (recorded == nullptr || !same_flags(*recorded, e) || newer) state.record(e.name, *own);
  }
  return state;
}

Status start_suite_state(const fs::path& dir, const std::string& name) {
  std::error_code ec;
  if (fs::exists(dir / kSuiteStateJson, ec) || fs::exists(dir / kSlurmDir / kSlurmJobsJson, ec)) {
    return Ok{};
  }
  IB_ASSIGN_OR_RETURN(const SuiteState fresh, open_suite_state(dir, name, false));
  fs::create_directories(dir, ec);
  return fresh.save(dir);
}

Result<int> submit_suite_slurm(const SuiteFlags& flags, const SuiteSpec& spec,
                               const std::vector<SuiteEntry>& entries, const fs::path& dir,
                               const PluginRegistry& registry) {
  if (!on_path("sbatch")) {
    return user_error(
        "--executor slurm: sbatch is not on PATH; install Slurm's client commands (Debian/Ubuntu: "
        "apt install slurm-client) on a machine that reaches the cluster's controller, or run "
        "the suite here without --executor");
  }
  IB_ASSIGN_OR_RETURN(const auto planned, validate_entries(entries, dir, registry));
  IB_TRY(start_suite_state(dir, spec.name));
  std::error_code ec;
  fs::create_directories(dir / kSlurmDir / "logs", ec);
  if (ec) {
    return runtime_error(
        fmt::format("cannot create {}: {}", (dir / kSlurmDir).string(), ec.message()));
  }
  IB_ASSIGN_OR_RETURN(const SuiteState state, merged_suite_state(dir, spec.name, entries));
  IB_ASSIGN_OR_RETURN(const auto jobs, read_jobs(dir));
  const auto slurm = slurm_task_states(jobs);

  // The entries to submit, by the resources their tasks ask for; entries Slurm still runs are
  // never submitted twice.
  std::map<std::string, std::vector<int>> by_gres;
  std::vector<std::string> busy, skipped;
  for (size_t i = 0; i < planned.size(); ++i) {
    const SuiteEntry& e = planned[i].entry;
    const int index = static_cast<int>(i);
    if (state.done(e, flags.retry_failed)) {
      skipped.push_back(e.name);
      continue;
    }
    if (const auto it = slurm.find(index);
        it != slurm.end() && slurm_state_active(it->second.second.state)) {
      busy.push_back(fmt::format("{} ({} in job {}_{})", e.name, it->second.second.state,
                                 it->second.first, index));
      continue;
    }
    std::string gres = flags.slurm_gres;
    if (gres.empty()) {
      const auto run = parse_run_args(e.args);
      gres = run.ok() && run->device == "cuda" ? "gpu:1" : "";
    } else if (gres == "none") {
      gres.clear();
    }
    by_gres[gres].push_back(index);
  }
  if (!busy.empty()) {
    return user_error(fmt::format(
        "--executor slurm: {} still pending or running in Slurm: {}; wait for them (or scancel "
        "the job), then submit again",
        busy.size() == 1 ? "an entry is" : fmt::format("{} entries are", busy.size()), join(busy)));
  }
  if (by_gres.empty()) {
    std::cout << fmt::format(
        "every entry of {} has finished ({}); `inferbench suite {} --result-dir {} --collect` "
        "writes the leaderboard{}\n",
        spec.name, join(skipped), flags.file, dir.string(),
        flags.retry_failed ? "" : " (--retry-failed submits the failed ones again)");
    return kExitOk;
  }

  const fs::path abs_dir = fs::absolute(dir);
  std::vector<std::string> command = {fs::read_symlink("/proc/self/exe", ec).string(), "suite",
                                      fs::absolute(flags.file).string(), "--result-dir",
                                      abs_dir.string()};
  if (ec || command[0].empty()) return runtime_error("cannot find the inferbench executable");
  if (!flags.model_list.empty()) command.insert(command.end(), {"--model-list", flags.model_list});
  for (const auto& o : flags.overrides) command.insert(command.end(), {"--override", o});
  command.push_back("--array-task");

  int submission = static_cast<int>(jobs.size());
  for (const auto& [gres, indices] : by_gres) {
    SlurmArray array;
    array.job_name = "inferbench-" + spec.name;
    array.indices = indices;
    array.partition = flags.slurm_partition;
    array.gres = gres;
    array.extra = flags.slurm_args;
    array.log_dir = (abs_dir / kSlurmDir / "logs").string();
    array.workdir = fs::current_path(ec).string();
    array.command = command;
    // Per task: the flag's minutes, else twice the longest earlier run of these entries plus 10
    // minutes (loading, warm-up), else an hour.
    array.time_limit_min = flags.slurm_time_limit_min;
    if (array.time_limit_min <= 0) {
      double longest_s = 0;
      for (const int i : indices) {
        if (const EntryState* s = state.find(entries[static_cast<size_t>(i)].name)) {
          longest_s = std::max(longest_s, s->wall_s);
        }
      }
      array.time_limit_min =
          longest_s > 0 ? static_cast<int>(std::ceil(2 * longest_s / 60)) + 10 : 60;
    }
    // A resubmitted entry's earlier task state must not be read as this submission's.
    for (const int i : indices) {
      fs::remove(dir / entries[static_cast<size_t>(i)].name / kEntryStateJson, ec);
    }
    const fs::path script = abs_dir / kSlurmDir / fmt::format("array-{}.sbatch", ++submission);
    IB_TRY(write_file_atomic(script, slurm_batch_script(array)));
    IB_ASSIGN_OR_RETURN(const CommandOutput out,
                        run_command({"sbatch", "--parsable", script.string()}));
    if (out.exit_code != 0) {
      return runtime_error(fmt::format("sbatch refused the job array {} (exit {}): {}",
                                       script.string(), out.exit_code, out.output));
    }
    IB_ASSIGN_OR_RETURN(const std::string id, parse_sbatch_job_id(out.output));
    std::vector<std::string> names;
    for (const int i : indices) names.push_back(entries[static_cast<size_t>(i)].name);
    IB_TRY(append_job(dir, json{{"job_id", id},
                                {"indices", indices},
                                {"entries", names},
                                {"script", script.string()},
                                {"gres", gres},
                                {"time_limit_min", array.time_limit_min},
                                {"submitted_utc", utc_timestamp_iso8601()}}));
    std::cout << fmt::format(
        "submitted Slurm job array {} ({} entr{}: {}), {} min per task{}; logs {}/{}_<task>.out\n",
        id, indices.size(), indices.size() == 1 ? "y" : "ies", join(names), array.time_limit_min,
        gres.empty() ? "" : ", --gres=" + gres, array.log_dir, id);
  }
  if (!skipped.empty()) std::cout << "finished earlier, not submitted: " << join(skipped) << "\n";
  std::cout << fmt::format("when the array ends: inferbench suite {} --result-dir {} --collect\n",
                           flags.file, dir.string());
  return kExitOk;
}

Result<int> run_suite_array_task(const SuiteFlags& flags, const SuiteSpec& spec,
                                 const std::vector<SuiteEntry>& entries, const fs::path& dir,
                                 const PluginRegistry& registry, const std::atomic<bool>& stop) {
  if (flags.array_task < 0 || static_cast<size_t>(flags.array_task) >= entries.size()) {
    return user_error(fmt::format("--array-task {}: the suite has {} entries, 0 to {}",
                                  flags.array_task, entries.size(), entries.size() - 1));
  }
  const SuiteEntry& entry = entries[static_cast<size_t>(flags.array_task)];
  SuiteEntry checked = entry;
  checked.allow_failure = true;  // an entry that cannot run here is recorded as failed
  IB_ASSIGN_OR_RETURN(auto planned, validate_entries({checked}, dir, registry));
  planned[0].entry = entry;
  const SuitePlan plan{spec.name, dir, std::move(planned), run_entry_eval};
  const EntryState s = run_suite_entry(plan, 0, registry, stop);
  IB_TRY(save_entry_state(dir, entry.name, s));
  if (s.status == "interrupted") return kExitInterrupted;
  return s.status == "failed" && !entry.allow_failure ? kExitRuntime : kExitOk;
}

Result<int> collect_suite(const SuiteSpec& spec, const std::vector<SuiteEntry>& entries,
                          const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir / kSuiteStateJson, ec) && !fs::exists(dir / kSlurmDir / kSlurmJobsJson, ec)) {
    return user_error(fmt::format(
        "--collect: {} holds no suite state and no Slurm submission; submit the suite into it "
        "with --executor slurm (or run it) first",
        dir.string()));
  }
  IB_ASSIGN_OR_RETURN(SuiteState state, merged_suite_state(dir, spec.name, entries));
  IB_ASSIGN_OR_RETURN(const auto jobs, read_jobs(dir));
  const auto slurm = slurm_task_states(jobs);
  std::vector<std::string> active, never;
  for (size_t i = 0; i < entries.size(); ++i) {
    const SuiteEntry& e = entries[i];
    if (state.done(e)) continue;
    const int index = static_cast<int>(i);
    const std::string job = latest_job_of(jobs, index);
    if (job.empty()) {
      never.push_back(e.name);
      continue;
    }
    const fs::path log = task_log(dir, job, index);
    const auto it = slurm.find(index);
    if (it != slurm.end() && it->second.first == job) {
      const SlurmTaskState& t = it->second.second;
      if (slurm_state_active(t.state)) {
        active.push_back(fmt::format("{} ({}, job {}_{})", e.name, t.state, job, index));
        continue;
      }
      EntryState s;
      s.status = "failed";
      s.args = e.args;
      s.eval_args = e.eval_args;
      s.error = fmt::format("Slurm task {}_{} ended {} (exit {}, {}) without a result; log: {}",
                            job, index, t.state, t.exit_code, t.reason, log.string());
      state.record(e.name, std::move(s));
    } else if (fs::exists(log, ec)) {
      EntryState s;
      s.status = "failed";
      s.args = e.args;
      s.eval_args = e.eval_args;
      s.error =
          fmt::format("Slurm task {}_{} left no result and Slurm no longer reports it; log: {}",
                      job, index, log.string());
      state.record(e.name, std::move(s));
    } else {
      never.push_back(e.name + " (job " + job + ", no log yet)");
    }
  }
  fs::create_directories(dir, ec);
  IB_TRY(state.save(dir));
  IB_TRY(write_suite_report(dir, spec.name, entries, state));
  int failed = 0;
  for (const SuiteEntry& e : entries) {
    const EntryState* s = state.find(e.name);
    if (s != nullptr && same_flags(*s, e) && s->status == "failed") {
      std::fprintf(stderr, "inferbench: suite entry %s failed: %s\n", e.name.c_str(),
                   s->error.c_str());
      failed += e.allow_failure ? 0 : 1;
    }
  }
  if (!active.empty()) {
    std::fprintf(stderr,
                 "inferbench: suite --collect: still in Slurm: %s; collect again when they end\n",
                 join(active).c_str());
  }
  if (!never.empty()) {
    std::fprintf(stderr, "inferbench: suite --collect: no result yet: %s\n", join(never).c_str());
  }
  return failed > 0 ? kExitRuntime : kExitOk;
}

}  // namespace ib
