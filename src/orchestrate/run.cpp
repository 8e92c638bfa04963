// `inferbench run`: target, collectors, runner and sinks, in that order of setup.
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "backend/kernel_switches.h"
#include "core/clock.h"
#include "core/fs.h"
#include "orchestrate/detail/client_sync.h"
#include "orchestrate/detail/run_report.h"
#include "orchestrate/detail/run_telemetry.h"
#include "orchestrate/orchestrate.h"
#include "report/report.h"
#include "report/routing_report.h"
#include "telemetry/telemetry.h"

namespace ib {
namespace {

using nlohmann::json;

std::string mib(const json& bytes) {
  if (!bytes.is_number()) return "n/a";
  return fmt::format("{:.1f} MiB", bytes.get<double>() / (1024.0 * 1024.0));
}

// "Decode: 4.21 ms/step median (device 4.10 ms, host 2.6%), 3.61 TB/s achieved = 91.6% of
// the measured copy ceiling 3.94 TB/s (86.8% of the reference 4.16 TB/s); 35 graphs."
std::vector<std::string> performance_lines(const json& perf) {
  std::vector<std::string> out;
  const double ceiling = perf.value("copy_ceiling_bytes_per_s", 0.0);
  for (const char* name : {"decode", "prefill"}) {
    if (!perf.contains(name) || perf[name].value("steps", 0) == 0) continue;
    const json& c = perf[name];
    std::string line =
        fmt::format("{}{}: {} steps, {:.0f} tok/s over their wall time, {:.3f} ms/step median",
                    name[0] == 'd' ? "D" : "P", name + 1, c["steps"].get<int64_t>(),
                    c["tokens_per_s"].get<double>(), c["median_step_ms"].get<double>());
    if (c.value("timed_steps", 0) > 0) {
      line += fmt::format(" (device {:.3f} ms, host overhead {:.1f}%)",
                          c["median_device_ms"].get<double>(),
                          100.0 * c["median_host_overhead_fraction"].get<double>());
    }
    line += fmt::format("; {:.0f} GB/s achieved", c["achieved_bytes_per_s"].get<double>() / 1e9);
    if (ceiling > 0) {
      line += fmt::format(
          " = {:.1f}% of the measured copy ceiling {:.2f} TB/s ({:.1f}% of the "
          "reference {:.2f} TB/s)",
          100.0 * c["fraction_of_copy_ceiling"].get<double>(), ceiling / 1e12,
          100.0 * c["fraction_of_reference_copy"].get<double>(),
          perf["reference_copy_bytes_per_s"].get<double>() / 1e12);
    }
    if (c.value("graph_steps", 0) > 0) {
      line += fmt::format("; {} steps replayed graphs", c["graph_steps"].get<int64_t>());
    }
    out.push_back(line + ".");
  }
  return out;
}

std::vector<std::string> footnotes(const BenchmarkReport& r, const RunPlan& plan) {
  std::vector<std::string> out;
  const json& engine = r.engine;
  if (engine.contains("device")) {
    out.push_back(fmt::format("Device: {}, {}; weights: {}.",
                              engine["device"]["name"].get<std::string>(),
                              engine["dtype"].get<std::string>(), r.weights));
  }
  if (engine.contains("engine") && engine["engine"].contains("kv_tokens")) {
    const json& e = engine["engine"];
    out.push_back(fmt::format("KV cache: {} tokens ({} blocks of {}) in {}.",
                              e["kv_tokens"].get<int64_t>(), e["num_kv_blocks"].get<int64_t>(),
                              e["block_size"].get<int64_t>(), e.value("kv_dtype", "?")));
  }
  // Tensor parallelism: the group, and where each rank's memory went.
  if (engine.contains("engine") && engine["engine"].value("tensor_parallel", json()).is_object()) {
    const json& g = engine["engine"]["tensor_parallel"];
    std::string line = "Tensor parallel: " + g.value("communicator", std::string("?"));
    for (const json& rank : g.value("ranks", json::array())) {
      line += fmt::format("; rank {} on {}", rank.value("rank", 0), rank.value("device", "?"));
      if (rank.contains("weights_bytes")) {
        line += fmt::format(": weights {}, KV cache {}, peak {}", mib(rank["weights_bytes"]),
                            mib(rank["kv_cache_bytes"]), mib(rank["peak_allocated_bytes"]));
      }
    }
    out.push_back(line + ".");
  }
  if (engine.contains("performance")) {
    for (auto& line : performance_lines(engine["performance"])) out.push_back(std::move(line));
  }
  std::string memory;
  if (r.memory.contains("rss")) {
    memory = fmt::format("Memory: peak RSS {} (VmHWM {})", mib(r.memory["rss"]["peak_rss_bytes"]),
                         mib(r.memory["rss"]["vm_hwm_bytes"]));
  }
  if (r.memory.contains("engine-pools") && r.memory["engine-pools"].value("available", false)) {
    const json& p = r.memory["engine-pools"];
    memory +=
        fmt::format("; engine weights {}, KV pool {}, KV used at peak {}", mib(p["weights_bytes"]),
                    mib(p["kv_pool_bytes"]), mib(p["kv_used_peak_bytes"]));
  }
  if (!memory.empty()) out.push_back(memory + ".");
  out.push_back(fmt::format("Results: {}/ ({}, {}, {}).", plan.result_dir.string(), kResultJson,
                            kRequestsJsonl, kSummaryCsv));
  return out;
}

// "inferbench: calibrated ... in 0.42 s", from the target's own record of it.
void print_calibrated(const Target& target) {
  const json d = json::parse(target.describe_json(), nullptr, false);
  const json c =
      d.is_object() ? d.value("engine", json::object()).value("calibration", json()) : json();
  if (!c.is_object()) return;
  std::fprintf(stderr,
               "inferbench: calibrated static activation scales in %.2f s (before the warm-ups; "
               "not in the measured numbers)\n",
               c.value("seconds", 0.0));
}

}  // namespace

BenchmarkReport report_header(const RunPlan& plan) {
  BenchmarkReport r;
  r.date = utc_timestamp_compact();
  r.backend = plan.backend;
  r.model_id = plan.model.name;
  r.num_prompts = plan.workload.num_prompts;
  r.request_rate = plan.runner.request_rate;
  r.burstiness = plan.runner.burstiness;
  if (plan.runner.max_concurrency > 0) r.max_concurrency = plan.runner.max_concurrency;
  r.num_warmups = plan.runner.num_warmups;
  r.runs_requested = plan.runner.runs;
  r.load_description = plan.load_description;
  r.metrics_options = plan.metrics;
  r.percentile_metrics = plan.percentile_metrics;
  r.config = plan.config;
  r.env = environment_fingerprint();
  return r;
}

Result<std::vector<std::unique_ptr<ReportSink>>> make_report_sinks(const PluginRegistry& registry) {
  IB_ASSIGN_OR_RETURN(const auto order, registry.load_order());
  std::vector<std::unique_ptr<ReportSink>> sinks;
  for (const auto& name : order) {
    if (registry.find(name)->kind != PluginKind::kReportSink) continue;
    IB_ASSIGN_OR_RETURN(const auto make, registry.factory<ReportSinkFactory>(name));
    sinks.push_back(make());
  }
  return sinks;
}

Result<Outcome> execute_run(const RunPlan& plan, const PluginRegistry& registry,
                            const std::atomic<bool>& stop, const RunProgress& progress) {
  if (plan.num_clients > 1) return execute_distributed_run(plan, registry, stop);
  // A client of a --num-clients run starts each run with the others; from here on, any error
  // return tells them (ClientSync's destructor) so that they stop waiting.
  std::optional<ClientSync> sync;
  if (plan.client_count > 1 && plan.client_sync_dir) {
    sync.emplace(*plan.client_sync_dir, plan.client_index, plan.client_count);
  }
  IB_ASSIGN_OR_RETURN(const auto order, registry.load_order());
  IB_ASSIGN_OR_RETURN(const auto make_target, registry.factory<TargetFactory>(plan.backend));
  // Telemetry starts before the model loads, so the peak includes loading.
  // A client of a --num-clients run shares the benchmark's origin, so its records merge as is.
  const int64_t origin_ns = client_clock_origin_ns(plan);
  RunTelemetry telemetry(plan, origin_ns);
  IB_ASSIGN_OR_RETURN(std::unique_ptr<Target> target,
                      make_target(telemetry.instrument(plan.target)));

  CollectorContext context;
  context.target_memory = [t = target.get()] { return t->memory(); };
  context.tensor_parallel_ranks = plan.target.native.engine.tensor_parallel_size;
  std::vector<std::unique_ptr<Collector>> collectors;
  for (const auto& name : order) {
    if (registry.find(name)->kind == PluginKind::kCollector && telemetry.enabled()) {
      IB_ASSIGN_OR_RETURN(const auto make, registry.factory<CollectorFactory>(name));
      collectors.push_back(make(context));
    }
  }
  IB_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<ReportSink>> sinks, make_report_sinks(registry));

  Sampler sampler(std::move(collectors), plan.memory_sample_interval_ms);
  if (telemetry.enabled()) IB_TRY(sampler.start(origin_ns));
  SteadyRunnerClock clock;
  Runner runner(*target, plan.runner, clock);
  for (const auto& name : unknown_ib_variables()) {
    std::fprintf(stderr,
                 "inferbench: warning: %s is set but is not a kernel switch; it selects nothing "
                 "(inferbench env lists the switches)\n",
                 name.c_str());
  }
  const std::optional<NativeCalibration>& calibration = plan.target.native.calibration;
  std::string then;
  if (calibration) {
    then = fmt::format(", then calibrating its activation scales on {} dataset prompts ({}, {})",
                       calibration->prompts.size(),
                       calibration_method_name(calibration->options.method),
                       activation_scheme_name(calibration->options.scheme));
  }
  std::fprintf(stderr, "inferbench: loading %s on %s%s\n", plan.model.name.c_str(),
               plan.device.c_str(), then.c_str());
  IB_TRY(target->setup(runner.callbacks()));
  telemetry.loaded(now_ns());
  if (calibration) print_calibrated(*target);

  // Only now, with the target loaded, does anything appear on disk.
  IB_TRY(create_result_dir(plan.result_dir, plan.overwrite));
  const SinkContext sink_context{plan.result_dir, &std::cout, origin_ns};
  for (auto& s : sinks) IB_TRY(s->begin(sink_context));
  std::fprintf(stderr, "inferbench: %d warm-up + %d x %d requests, %s\n", plan.runner.num_warmups,
               plan.runner.runs, plan.workload.num_prompts, plan.load_description.c_str());

  RunnerHooks hooks;
  hooks.stop = &stop;
  hooks.on_record = [&](const RequestRecord& rec) -> Status {
    for (auto& s : sinks) IB_TRY(s->on_record(rec));
    return Ok{};
  };
  if (progress.update) hooks.on_progress = progress.update;
  if (sync) hooks.before_run = [&](int run) { return sync->before_run(run, &stop); };
  auto records = runner.run(plan.requests, hooks);
  if (sync && records.ok()) sync->done();
  if (progress.clear) progress.clear();
  sampler.stop();
  if (!records.ok()) {
    target->teardown();
    return records.error();
  }

  BenchmarkReport report = report_header(plan);
  report.engine = json::parse(target->describe_json(), nullptr, false);
  if (report.engine.is_discarded()) report.engine = json::object();
  // The switches the backend used sit beside config and env; a target without a backend of ours
  // (HTTP) records the ones the environment sets, as not applying.
  if (report.engine.contains("kernel_switches")) {
    report.kernel_switches = std::move(report.engine["kernel_switches"]);
    report.engine.erase("kernel_switches");
  } else {
    report.kernel_switches = kernel_switches_json(unapplied_kernel_switches());
  }
  report.weights = report.engine.value("weights", "");
  add_results(report, *records);
  target->teardown();
  telemetry.finish(sampler, *records, report);
  report.footnotes = footnotes(report, plan);
  const auto memory_files = telemetry.write_outputs(plan.result_dir, report);
  // A mixture-of-experts engine's routing, as a picture beside result.json's engine.routing.
  if (const std::string svg = expert_load_svg(report.engine.value("routing", json()),
                                              "Expert load: " + plan.model.name);
      !svg.empty()) {
    IB_TRY(write_file_atomic(plan.result_dir / kExpertLoadSvg, svg));
    std::fprintf(stderr, "inferbench: expert routing: %s\n", kExpertLoadSvg);
  }
  for (auto& s : sinks) IB_TRY(s->finish(report));
  if (!memory_files.ok()) {
    std::fprintf(stderr, "inferbench: memory outputs not written: %s\n",
                 memory_files.error().message.c_str());
  } else if (!memory_files->empty()) {
    std::string names;
    for (const auto& f : *memory_files) names += (names.empty() ? "" : ", ") + f;
    std::fprintf(stderr, "inferbench: memory telemetry: %s\n", names.c_str());
  }
  std::fprintf(stderr, "inferbench: results in %s\n", plan.result_dir.string().c_str());
  if (records->interrupted) return Outcome::kInterrupted;
  // A benchmark in which no measured request succeeded measured nothing: say why and fail.
  const RequestRecord* first_failure = nullptr;
  bool any_ok = false;
  for (const auto& run : records->runs) {
    for (const auto& rec : run) {
      any_ok = any_ok || rec.ok;
      if (!rec.ok && first_failure == nullptr) first_failure = &rec;
    }
  }
  if (!any_ok && first_failure != nullptr) {
    std::fprintf(stderr,
                 "inferbench: error: every measured request failed (first: %s); check the target "
                 "(--base-url, --model, the server's log) and rerun\n",
                 first_failure->error.c_str());
    return Outcome::kFailed;
  }
  return Outcome::kOk;
}

}  // namespace ib
