#include "cli/plugins.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/build_info.h"
#include "report/report.h"
#include "targets/targets.h"
#include "telemetry/collector.h"
#include "workload/workload.h"

namespace ib {

Status register_builtin_plugins(PluginRegistry& r) {
  const std::string v = build_info().version;
  auto info = [&](const char* name, PluginKind kind, std::vector<std::string> deps,
                  const char* description) {
    return PluginInfo{name, v, kind, std::move(deps), description};
  };
  IB_TRY(r.add(info("native", PluginKind::kTarget, {}, "the embedded engine, in process"),
               TargetFactory([](const TargetOptions& o) -> Result<std::unique_ptr<Target>> {
                 return make_native_target(o.native);
               })));
  IB_TRY(r.add(info("openai", PluginKind::kTarget, {},
                    "an OpenAI-compatible server, /v1/completions over HTTP(S), streamed"),
               TargetFactory([](const TargetOptions& o) { return make_openai_target(o.openai); })));
  IB_TRY(r.add(info("openai-chat", PluginKind::kTarget, {},
                    "an OpenAI-compatible server, /v1/chat/completions over HTTP(S), streamed"),
               TargetFactory([](const TargetOptions& o) {
                 OpenAITargetOptions chat = o.openai;
                 chat.chat = true;
                 return make_openai_target(std::move(chat));
               })));
  IB_TRY(r.add(info("random-dataset", PluginKind::kWorkload, {},
                    "random token prompts, fixed or "
                    "distributed lengths"),
               WorkloadFactory([](const WorkloadOptions& o, const Tokenizer&) {
                 return make_random_requests(o);
               })));
  IB_TRY(r.add(info("random-mm-dataset", PluginKind::kWorkload, {},
                    "random token prompts with random images (vision-language models)"),
               WorkloadFactory([](const WorkloadOptions& o, const Tokenizer&) {
                 return make_random_mm_requests(o);
               })));
  IB_TRY(r.add(
      info("jsonl-dataset", PluginKind::kWorkload, {}, "prompts from a JSONL file (text or ids)"),
      WorkloadFactory(load_jsonl_requests)));
  IB_TRY(r.add(info("rss", PluginKind::kCollector, {}, "process resident memory and VmHWM"),
               CollectorFactory([](const CollectorContext&) { return make_rss_collector(); })));
  IB_TRY(r.add(info("engine-pools", PluginKind::kCollector, {"native"},
                    "the engine's weights, KV pool and allocator peaks"),
               CollectorFactory(make_engine_pools_collector)));
  IB_TRY(r.add(info("nvml", PluginKind::kCollector, {},
                    "GPU memory (v2 and v1), power, energy counter, clocks, utilisation (dlopen)"),
               CollectorFactory(make_nvml_collector)));
  IB_TRY(r.add(
      info("jsonl", PluginKind::kReportSink, {}, "requests.jsonl, appended as requests finish"),
      ReportSinkFactory(make_jsonl_sink)));
  IB_TRY(r.add(info("json", PluginKind::kReportSink, {"rss", "engine-pools"},
                    "result.json with vLLM bench-serve keys"),
               ReportSinkFactory(make_json_sink)));
  IB_TRY(r.add(info("csv", PluginKind::kReportSink, {}, "summary.csv, one row per run"),
               ReportSinkFactory(make_csv_sink)));
  IB_TRY(r.add(info("markdown", PluginKind::kReportSink, {"rss"}, "the summary table on stdout"),
               ReportSinkFactory(make_markdown_sink)));
  return Ok{};
}

std::string workload_plugin_name(const std::string& dataset_name) {
  return dataset_name + "-dataset";
}

Result<std::string> plugins_table(const PluginRegistry& registry) {
  IB_ASSIGN_OR_RETURN(const auto order, registry.load_order());
  std::string out = "| load order | name | kind | version | depends on | description |\n";
  out += "| ---: | --- | --- | --- | --- | --- |\n";
  for (size_t i = 0; i < order.size(); ++i) {
    const PluginInfo* p = registry.find(order[i]);
    out += fmt::format(
        "| {} | {} | {} | {} | {} | {} |\n", i + 1, p->name, plugin_kind_name(p->kind), p->version,
        p->depends_on.empty() ? "-" : fmt::format("{}", fmt::join(p->depends_on, ", ")),
        p->description);
  }
  return out;
}

}  // namespace ib
