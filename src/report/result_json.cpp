// result.json: vLLM `bench serve` top-level keys (the median over runs), then our sections.
#include <algorithm>
#include <cmath>

#include "report/report.h"
#include "report/stability.h"

namespace ib {
namespace {

using json = nlohmann::ordered_json;

bool is_count(const std::string& key) {
  return key == "completed" || key == "failed" || key == "total_input_tokens" ||
         key == "total_output_tokens" || key == "total_visual_tokens";
}

json number(const std::string& key, double v) {
  if (is_count(key)) return static_cast<int64_t>(std::llround(v));
  return v;
}

// The metric of a latency key "{stat}_{metric}_ms" ("p99.9_itl_ms" -> "itl"); empty otherwise.
std::string latency_metric_of(const std::string& key) {
  const size_t underscore = key.find('_');
  if (key.size() < 4 || key.compare(key.size() - 3, 3, "_ms") != 0 ||
      underscore == std::string::npos || underscore + 4 > key.size()) {
    return "";
  }
  return key.substr(underscore + 1, key.size() - underscore - 4);
}

// Top-level keys: every run-level scalar; of the latency statistics, ttft, tpot, itl and e2el
// always (vLLM readers look for them) plus whatever --percentile-metrics adds.
bool top_level(const std::string& key, const std::vector<std::string>& selected) {
  const std::string metric = latency_metric_of(key);
  if (metric.empty()) return true;
  for (const char* base : {"ttft", "tpot", "itl", "e2el", "encode", "ttft_queue", "ttft_prefill"}) {
    if (metric == base) return true;
  }
  return std::find(selected.begin(), selected.end(), metric) != selected.end();
}

json run_json(const std::vector<MetricValue>& values) {
  json j = json::object();
  for (const auto& v : values) j[v.key] = number(v.key, v.value);
  return j;
}

}  // namespace

nlohmann::ordered_json result_json(const BenchmarkReport& r) {
  json j = json::object();
  j["date"] = r.date;
  j["backend"] = r.backend;
  j["model_id"] = r.model_id;
  j["num_prompts"] = r.num_prompts;
  j["request_rate"] = std::isinf(r.request_rate) ? json("inf") : json(r.request_rate);
  j["burstiness"] = r.burstiness;
  j["max_concurrency"] = r.max_concurrency ? json(*r.max_concurrency) : json(nullptr);
  if (!r.metrics_options.goodput) j["request_goodput"] = nullptr;
  for (const auto& a : r.aggregate) {
    if (top_level(a.key, r.percentile_metrics)) j[a.key] = number(a.key, a.spread.median);
  }
  j["interrupted"] = r.interrupted;
  j["num_runs"] = r.runs.size();
  j["runs_requested"] = r.runs_requested;
  j["num_warmups"] = r.num_warmups;
  j["config"] = json(r.config);
  j["env"] = json(r.env);
  j["kernel_switches"] = json(r.kernel_switches);
  j["definitions"] = json(metric_definitions());

  json runs = json::array();
  for (size_t i = 0; i < r.runs_flat.size(); ++i) {
    runs.push_back(json{{"run", i}, {"metrics", run_json(r.runs_flat[i])}});
  }
  j["runs"] = std::move(runs);
  if (r.partial_run) {
    j["partial_run"] =
        json{{"note", "the run in progress when the benchmark was interrupted; not in the medians"},
             {"metrics", run_json(flatten_metrics(*r.partial_run, r.metrics_options.percentiles))}};
  }
  const Stability stability = stability_of(r);
  json spread = json::object();
  for (size_t k = 0; k < r.aggregate.size(); ++k) {
    const auto& a = r.aggregate[k];
    json s{{"unit", a.unit},
           {"median", a.spread.median},
           {"min", a.spread.min},
           {"max", a.spread.max},
           {"per_run", a.per_run}};
    if (a.spread.ci95) s["ci95"] = json::array({a.spread.ci95->lo, a.spread.ci95->hi});
    if (k < stability.metrics.size()) {
      s["cv"] = stability.metrics[k].cv;
      s["unstable"] = stability.metrics[k].unstable;
    }
    spread[a.key] = std::move(s);
  }
  j["spread"] = std::move(spread);
  j["stability"] = json(stability_json(stability));
  j["memory"] = json(r.memory);
  j["energy"] = json(r.energy);
  j["engine"] = json(r.engine);
  j["weights"] = r.weights;
  if (!r.per_adapter.empty()) {
    json adapters = json::object();
    for (const auto& a : r.per_adapter) {
      json m{{"requests", a.requests}};
      for (const auto& metric : a.aggregate)
        m[metric.key] = number(metric.key, metric.spread.median);
      adapters[a.adapter] = std::move(m);
    }
    j["lora_adapters"] = std::move(adapters);
  }
  return j;
}

std::string request_json_line(const RequestRecord& rec, int64_t origin_ns) {
  json times = json::array();
  for (int64_t t : rec.token_times_ns) times.push_back(t - origin_ns);
  const bool has_first = !rec.token_times_ns.empty();
  json j{
      {"run", rec.run},
      {"warmup", rec.run == kWarmupRun},
      {"id", rec.id},
      {"prompt_index", rec.prompt_index},
      {"ok", rec.ok},
      {"finish_reason", rec.finish_reason},
      {"error", rec.error.empty() ? json(nullptr) : json(rec.error)},
      {"n_in", rec.n_in},
      {"n_out_requested", rec.n_out_requested},
      {"n_out", rec.n_out},
      {"n_out_received", rec.token_times_ns.size()},
      {"chunks", rec.chunks},
      {"t_sched_ns", rec.t_sched_ns - origin_ns},
      {"t_send_ns", rec.t_send_ns - origin_ns},
      {"t_first_ns", has_first ? json(rec.t_first_ns - origin_ns) : json(nullptr)},
      {"t_end_ns", rec.t_end_ns - origin_ns},
      {"ttft_ms", has_first ? json(static_cast<double>(rec.ttft_ns()) / 1e6) : json(nullptr)},
      {"tpot_ms", rec.n_out > 1 ? json(rec.tpot_ms()) : json(nullptr)},
      {"e2el_ms", static_cast<double>(rec.e2el_ns()) / 1e6},
      {"client_queue_time_ms", static_cast<double>(rec.queue_ns()) / 1e6},
      {"token_times_ns", std::move(times)},
  };
  if (!rec.lora_name.empty()) j["lora_adapter"] = rec.lora_name;
  if (rec.visual_tokens > 0) {
    j["visual_tokens"] = rec.visual_tokens;
    j["encode_ms"] = static_cast<double>(rec.encode_ns) / 1e6;
    const bool split = has_first && rec.t_scheduled_ns != 0;
    j["t_scheduled_ns"] = rec.t_scheduled_ns != 0 ? json(rec.t_scheduled_ns - origin_ns) : json();
    j["ttft_queue_ms"] = split ? json(static_cast<double>(rec.ttft_queue_ns()) / 1e6) : json();
    j["ttft_prefill_ms"] = split ? json(static_cast<double>(rec.ttft_prefill_ns()) / 1e6) : json();
    j["kv_bytes"] = rec.kv_bytes;
  }
  return j.dump();
}

Result<RequestRecord> parse_request_json_line(const std::string& line, int64_t origin_ns) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object()) return runtime_error("a requests.jsonl line is not a JSON object");
  RequestRecord r;
  try {
    r.run = j.at("run").get<int>();
    r.id = j.at("id").get<uint64_t>();
    r.prompt_index = j.at("prompt_index").get<uint64_t>();
    r.ok = j.at("ok").get<bool>();
    r.finish_reason = j.at("finish_reason").get<std::string>();
    if (!j.at("error").is_null()) r.error = j.at("error").get<std::string>();
    r.n_in = j.at("n_in").get<int>();
    r.n_out_requested = j.at("n_out_requested").get<int>();
    r.n_out = j.at("n_out").get<int>();
    r.chunks = j.at("chunks").get<int>();
    r.t_sched_ns = j.at("t_sched_ns").get<int64_t>() + origin_ns;
    r.t_send_ns = j.at("t_send_ns").get<int64_t>() + origin_ns;
    if (!j.at("t_first_ns").is_null()) r.t_first_ns = j.at("t_first_ns").get<int64_t>() + origin_ns;
    r.t_end_ns = j.at("t_end_ns").get<int64_t>() + origin_ns;
    for (const auto& t : j.at("token_times_ns"))
      r.token_times_ns.push_back(t.get<int64_t>() + origin_ns);
    if (j.contains("lora_adapter")) r.lora_name = j["lora_adapter"].get<std::string>();
    if (j.contains("visual_tokens")) {
      r.visual_tokens = j["visual_tokens"].get<int>();
      r.encode_ns = std::llround(j.at("encode_ms").get<double>() * 1e6);
      if (!j.at("t_scheduled_ns").is_null()) {
        r.t_scheduled_ns = j["t_scheduled_ns"].get<int64_t>() + origin_ns;
      }
      r.kv_bytes = j.at("kv_bytes").get<int64_t>();
    }
  } catch (const nlohmann::json::exception& e) {
    return runtime_error(std::string("a malformed requests.jsonl line: ") + e.what());
  }
  return r;
}

}  // namespace ib
