// Internal to orchestrate/: what a run's report starts from, shared by the single-process run
// and the merge of a --num-clients run.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/plugin_registry.h"
#include "orchestrate/orchestrate.h"
#include "report/report.h"

namespace ib {

// result.json's header: date, backend, model, workload, load, config and environment.
BenchmarkReport report_header(const RunPlan& plan);

// The registry's report sinks (result.json, requests.jsonl, summary.csv, the table), in load
// order.
Result<std::vector<std::unique_ptr<ReportSink>>> make_report_sinks(const PluginRegistry& registry);

// A client's time zero on this host's monotonic clock: the parent's (RunConfig's
// clock_origin_ns, one host), or the one clock's reading at the parent's wall-clock origin
// (clock_origin_unix_ns, Slurm tasks on other hosts: as exact as the hosts' clocks agree), or now.
int64_t client_clock_origin_ns(const RunConfig& config);
// The wall clock (CLOCK_REALTIME) in Unix ns, read once per run for the Slurm clients' origin.
int64_t unix_now_ns();

}  // namespace ib
