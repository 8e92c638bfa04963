// `inferbench suite FILE.yaml`: its flags, every entry planned as `inferbench run` would plan it
// (all bad ones reported together), --dry-run and --report-only; orchestrate/ runs the suite.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/detail/suite_support.h"
#include "cli/progress_line.h"
#include "cli/suite_commands.h"
#include "orchestrate/orchestrate.h"
#include "suite/suite.h"

namespace ib {
namespace {

namespace fs = std::filesystem;

// The `inferbench eval` of an entry with eval_args: its run's model, device, dtype, weights, seed,
// quantization, KV-cache dtype, block-sparse pattern and calibration (on the run's dataset), then
// the entry's eval flags.
Result<EvalFlags> entry_eval_flags(const SuiteEntry& e) {
  IB_ASSIGN_OR_RETURN(const RunFlags run, parse_run_args(e.args));
  std::vector<std::string> args = {"--model",          run.model,
                                   "--device",         run.device,
                                   "--dtype",          run.dtype,
                                   "--load-format",    run.load_format,
                                   "--seed",           std::to_string(run.seed),
                                   "--quantization",   run.quantization,
                                   "--kv-cache-dtype", run.kv_cache_dtype};
  if (!run.block_sparse_attention.empty()) {
    args.insert(args.end(), {"--block-sparse-attention", run.block_sparse_attention});
  }
  const std::vector<std::string> calibration = calibration_args(run);
  if (!calibration.empty()) {
    args.insert(args.end(), calibration.begin(), calibration.end());
    args.insert(args.end(), {"--dataset-path", run.dataset_path});
  }
  args.insert(args.end(), e.eval_args->begin(), e.eval_args->end());
  CLI::App app{"eval"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  EvalFlags flags;
  add_eval_flags(app, flags);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& err) {
    return user_error(fmt::format("eval: {}; see inferbench eval --help", err.what()));
  }
  return flags;
}

}  // namespace

// The suite's eval step: the entry's eval, its JSON at `json`.
Status run_entry_eval(const SuiteEntry& e, const fs::path& json) {
  IB_ASSIGN_OR_RETURN(EvalFlags flags, entry_eval_flags(e));
  flags.output_json = json.string();
  const auto code = execute_eval(flags);
  if (!code.ok()) return code.error();
  return Ok{};
}

// Every entry resolved as `inferbench run` would resolve it; all bad ones reported together
// (those with allow_failure are kept, to be recorded as not run).
Result<std::vector<SuiteEntryPlan>> validate_entries(const std::vector<SuiteEntry>& entries,
                                                     const fs::path& dir,
                                                     const PluginRegistry& registry) {
  std::vector<SuiteEntryPlan> out;
  std::vector<std::string> problems;
  for (const auto& e : entries) {
    auto flags = parse_run_args(e.args);
    std::string problem;
    if (flags.ok()) {
      flags->result_dir = (dir / e.name).string();
      flags->overwrite = true;  // the suite owns DIR/<entry>: a rerun replaces a partial result
      auto plan = resolve_run(*flags, registry);
      if (plan.ok() && e.eval_args) {
        if (auto eval = entry_eval_flags(e); !eval.ok()) plan = eval.error();
      }
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
  app.add_flag("--retry-failed", f.retry_failed,
               "run the entries recorded as failed again (a resumed or resubmitted suite skips "
               "them otherwise)");
  app.add_option("--executor", f.executor,
                 "where the entries run: local (here, one after another), slurm (one Slurm job "
                 "array, a task per entry; then --collect) or k8s (Indexed Job manifests for "
                 "kubectl apply; then --collect)")
      ->check(CLI::IsMember({"local", "slurm", "k8s"}));
  app.add_option("--k8s-image", f.k8s_image,
                 "--executor k8s: the container image (inferbench on its PATH)");
  app.add_option("--k8s-namespace", f.k8s_namespace, "--executor k8s: the Jobs' namespace")
      ->capture_default_str();
  app.add_option("--k8s-pvc", f.k8s_pvc,
                 "--executor k8s: the PersistentVolumeClaim mounted at --result-dir");
  app.add_option("--k8s-gpu-resource", f.k8s_gpu_resource,
                 "--executor k8s: the resource a cuda entry's pod asks one of")
      ->capture_default_str();
  app.add_option("--slurm-partition", f.slurm_partition, "sbatch --partition of the array");
  app.add_option("--slurm-gres", f.slurm_gres,
                 "sbatch --gres of each task (default gpu:1 for cuda entries, none for cpu ones; "
                 "none: no gres)");
  app.add_option("--slurm-time-limit", f.slurm_time_limit_min,
                 "minutes per task (default: twice the entry's last run + 10, else 60)")
      ->check(CLI::Range(1, 525600));
  app.add_option("--slurm-arg", f.slurm_args,
                 "an extra sbatch option for the array, e.g. --slurm-arg=--account=lab "
                 "(repeatable)");
  app.add_option("--array-task", f.array_task,
                 "run only entry N (0-based), its state into DIR/<entry>/entry-state.json: what "
                 "each task of --executor slurm's array runs")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--collect", f.collect,
               "merge the entries' states (a Slurm array's tasks, and Slurm's word on tasks that "
               "left none) into --result-dir's suite state and write the leaderboard");
}

Result<int> execute_suite(const SuiteFlags& flags, const PluginRegistry& registry,
                          const std::atomic<bool>& stop) {
  IB_ASSIGN_OR_RETURN(const SuiteSpec spec, load_suite_file(flags.file));
  IB_ASSIGN_OR_RETURN(auto entries, select_models(spec.entries, flags.model_list));
  for (const auto& o : flags.overrides) IB_TRY(apply_override(entries, o));
  const fs::path dir =
      flags.result_dir.empty() ? fs::path("results") / spec.name : fs::path(flags.result_dir);
  const int modes = (flags.dry_run ? 1 : 0) + (flags.report_only ? 1 : 0) +
                    (flags.collect ? 1 : 0) + (flags.array_task >= 0 ? 1 : 0) +
                    (flags.executor != "local" ? 1 : 0);
  if (modes > 1) {
    return user_error(
        "suite: --dry-run, --report-only, --collect, --array-task and --executor slurm|k8s are "
        "separate steps; give one of them");
  }
  if (flags.collect) return collect_suite(spec, entries, dir);
  if (flags.array_task >= 0) {
    return run_suite_array_task(flags, spec, entries, dir, registry, stop);
  }
  if (flags.executor == "slurm") return submit_suite_slurm(flags, spec, entries, dir, registry);
  if (flags.executor == "k8s") return write_suite_k8s(flags, spec, entries, dir, registry);
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
        if (e.eval_args) {
          line +=
              "; then inferbench eval (the run's model, device, dtype, quantization, KV cache, "
              "calibration)";
          for (const auto& a : *e.eval_args) line += " " + a;
          line += " --output-json " + (dir / e.name / kEvalJson).string();
        }
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
    IB_TRY(write_suite_report(dir, spec.name, entries, finished));
    return kExitOk;
  }
  IB_ASSIGN_OR_RETURN(SuiteState state, open_suite_state(dir, spec.name, flags.resume));
  IB_ASSIGN_OR_RETURN(auto planned, validate_entries(entries, dir, registry));
  ProgressLine line(::isatty(STDERR_FILENO) == 1);
  SuitePlan plan{spec.name, dir, std::move(planned), run_entry_eval};
  plan.retry_failed = flags.retry_failed;
  IB_ASSIGN_OR_RETURN(const Outcome outcome, execute_suite(plan, std::move(state), registry, stop,
                                                           progress_callbacks(line)));
  return exit_code(outcome);
}

}  // namespace ib
