// Internal to orchestrate/: what a run's report starts from, shared by the single-process run
// and the merge of a --num-clients run.
#pragma once

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

}  // namespace ib
