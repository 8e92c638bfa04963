// inferbench: reproducible LLM inference benchmarks. Exit codes: 0 ok, 1 runtime failure,
// 2 user error, 130 interrupted.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/interrupt.h"
#include "cli/plugins.h"
#include "cli/progress_line.h"
#include "cli/serve_command.h"
#include "cli/suite_commands.h"
#include "cli/sweep_command.h"
#include "core/build_info.h"
#include "model/presets.h"
#include "telemetry/env.h"

namespace {

int fail(const ib::Error& e) {
  std::fprintf(stderr, "inferbench: error: %s\n", e.message.c_str());
  return e.kind == ib::ErrorKind::kUser ? ib::kExitUser : ib::kExitRuntime;
}

// The arguments after `run`, without --from and its value: overrides of a recorded config.
std::vector<std::string> run_overrides(int argc, char** argv) {
  std::vector<std::string> out;
  int i = 1;
  while (i < argc && std::string(argv[i]) != "run") ++i;
  for (++i; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--from") {
      ++i;
    } else if (arg.rfind("--from=", 0) != 0) {
      out.push_back(arg);
    }
  }
  return out;
}

int suite_command(const ib::SuiteFlags& flags) {
  ib::InterruptWatcher interrupts;
  ib::PluginRegistry registry;
  if (auto st = ib::register_builtin_plugins(registry); !st.ok()) return fail(st.error());
  auto code = ib::execute_suite(flags, registry, interrupts.flag());
  return code.ok() ? *code : fail(code.error());
}

int run_command(ib::RunFlags flags, const std::string& from,
                const std::vector<std::string>& overrides) {
  ib::InterruptWatcher interrupts;  // first: every later thread inherits the blocked signals
  ib::PluginRegistry registry;
  if (auto st = ib::register_builtin_plugins(registry); !st.ok()) return fail(st.error());
  nlohmann::json recorded_config;
  if (!from.empty()) {
    auto recorded = ib::flags_from_result(from, overrides, &recorded_config);
    if (!recorded.ok()) return fail(recorded.error());
    flags = *recorded;
  }
  auto plan = ib::resolve_run(flags, registry);
  if (!plan.ok()) return fail(plan.error());
  if (!from.empty()) {
    for (const auto& d : ib::config_drift(recorded_config, plan->config, overrides)) {
      std::fprintf(stderr, "inferbench: warning: --from: %s differs from the record (%s)\n",
                   from.c_str(), d.c_str());
    }
  }
  ib::ProgressLine progress(!flags.disable_tqdm && ::isatty(STDERR_FILENO) == 1);
  auto outcome =
      ib::execute_run(*plan, registry, interrupts.flag(), ib::progress_callbacks(progress));
  if (!outcome.ok()) return fail(outcome.error());
  return ib::exit_code(*outcome);
}

int sweep_command(const ib::SweepFlags& flags) {
  ib::InterruptWatcher interrupts;
  ib::PluginRegistry registry;
  if (auto st = ib::register_builtin_plugins(registry); !st.ok()) return fail(st.error());
  auto code = ib::execute_sweep(flags, registry, interrupts.flag());
  return code.ok() ? *code : fail(code.error());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "inferbench: reproducible LLM inference benchmarks (tok/s, TTFT, ITL, TPOT, E2EL, "
      "memory)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(ib::build_info().version) + " (git " +
                                        ib::build_info().git_sha + ")");

  ib::RunFlags flags;
  CLI::App* run =
      app.add_subcommand("run", "one benchmark: target x model x workload, --runs times");
  ib::add_run_flags(*run, flags);
  std::string run_from;
  run->add_option("--from", run_from,
                  "rerun the configuration recorded in a result.json (or its directory); other "
                  "flags override it");
  ib::ServeFlags serve_flags;
  CLI::App* serve = app.add_subcommand(
      "serve", "the engine (or the null model) behind an OpenAI-compatible HTTP API");
  ib::add_serve_flags(*serve, serve_flags);
  ib::SweepFlags sweep_flags;
  CLI::App* sweep = app.add_subcommand(
      "sweep", "stress grid (batch sizes x input lengths) or --find-oom thresholds");
  ib::add_sweep_flags(*sweep, sweep_flags);
  ib::GenerateFlags gen_flags;
  CLI::App* generate = app.add_subcommand(
      "generate", "greedy tokens (and optionally logits) for one prompt of token ids");
  ib::add_generate_flags(*generate, gen_flags);
  ib::EvalFlags eval_flags;
  CLI::App* eval = app.add_subcommand(
      "eval",
      "a quantization's accuracy loss: KL divergence and top-1 against the unquantized model");
  ib::add_eval_flags(*eval, eval_flags);
  ib::TokenizeFlags tokenize_flags;
  CLI::App* tokenize =
      app.add_subcommand("tokenize", "a text's token ids and count in a model's own tokenizer");
  ib::add_tokenize_flags(*tokenize, tokenize_flags);
  CLI::App* models = app.add_subcommand("models", "list architecture presets");
  CLI::App* env = app.add_subcommand("env", "print the environment fingerprint");
  bool env_json = false;
  env->add_flag("--json", env_json, "as JSON, as stored in result.json");
  CLI::App* plugins = app.add_subcommand("plugins", "list plugins and their load order");
  ib::PlotFlags plot_flags;
  CLI::App* plot = app.add_subcommand("plot", "cross-run memory heatmap from result directories");
  plot->add_option("dirs", plot_flags.dirs, "result directories")->required();
  plot->add_option("--out", plot_flags.out, "output file: .svg or .html")->required();
  plot->add_flag("--expert-load", plot_flags.expert_load,
                 "one mixture-of-experts run's layer x expert load heatmap (.svg) from its "
                 "result.json, instead of the memory heatmap");
  plot->add_option("--frames", plot_flags.frames, "time frames of the heatmap")
      ->capture_default_str();

  ib::SuiteFlags suite_flags;
  CLI::App* suite = app.add_subcommand(
      "suite", "a suite file of benchmarks (models x dtypes x workloads) -> leaderboard");
  ib::add_suite_flags(*suite, suite_flags);
  ib::CompareFlags compare_flags;
  CLI::App* compare = app.add_subcommand(
      "compare", "two results metric by metric; exit 1 on a significant regression");
  ib::add_compare_flags(*compare, compare_flags);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "inferbench: error: %s; see inferbench --help\n", e.what());
    return ib::kExitUser;
  }

  if (run->parsed()) return run_command(flags, run_from, run_overrides(argc, argv));
  if (suite->parsed()) return suite_command(suite_flags);
  if (compare->parsed()) {
    auto code = ib::execute_compare(compare_flags);
    return code.ok() ? *code : fail(code.error());
  }
  if (sweep->parsed()) return sweep_command(sweep_flags);
  if (serve->parsed()) {
    auto code = ib::execute_serve(serve_flags);
    return code.ok() ? *code : fail(code.error());
  }
  if (generate->parsed()) {
    auto code = ib::execute_generate(gen_flags);
    if (!code.ok()) return fail(code.error());
    return *code;
  }
  if (eval->parsed()) {
    auto code = ib::execute_eval(eval_flags);
    if (!code.ok()) return fail(code.error());
    return *code;
  }
  if (tokenize->parsed()) {
    auto code = ib::execute_tokenize(tokenize_flags);
    return code.ok() ? *code : fail(code.error());
  }
  if (models->parsed()) {
    std::cout << ib::models_table(ib::all_presets());
    return ib::kExitOk;
  }
  if (env->parsed()) {
    const auto fingerprint = ib::environment_fingerprint();
    std::cout << (env_json ? fingerprint.dump(2) + "\n" : ib::format_environment(fingerprint));
    return ib::kExitOk;
  }
  if (plot->parsed()) {
    auto code = ib::execute_plot(plot_flags);
    if (!code.ok()) return fail(code.error());
    return *code;
  }
  if (plugins->parsed()) {
    ib::PluginRegistry registry;
    if (auto st = ib::register_builtin_plugins(registry); !st.ok()) return fail(st.error());
    auto table = ib::plugins_table(registry);
    if (!table.ok()) return fail(table.error());
    std::cout << *table;
    return ib::kExitOk;
  }
  return ib::kExitUser;
}
