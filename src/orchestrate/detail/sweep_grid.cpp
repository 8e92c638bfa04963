// The sweep grid's cells and outputs.
#include "orchestrate/detail/sweep_grid.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace ib::detail {
namespace {

using nlohmann::json;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Columns of grid.csv, in order (also the keys of a cell).
const std::vector<std::string> kColumns = {"batch_size",
                                           "input_len",
                                           "status",
                                           "output_throughput",
                                           "total_token_throughput",
                                           "p50_ttft_ms",
                                           "p95_ttft_ms",
                                           "p99_ttft_ms",
                                           "p50_tpot_ms",
                                           "p95_tpot_ms",
                                           "p99_tpot_ms",
                                           "step_p50_ms",
                                           "step_p95_ms",
                                           "step_jitter_ms",
                                           "peak_demand_bytes",
                                           "peak_allocated_bytes",
                                           "nvml_peak_used_bytes",
                                           "fragmentation",
                                           "oom",
                                           "steps_before_oom",
                                           "preemptions",
                                           "first_preemption_step",
                                           "completed",
                                           "failed",
                                           "result_dir",
                                           "message"};

json number_at(const json& j, std::initializer_list<const char*> path) {
  const json* p = &j;
  for (const char* k : path) {
    if (!p->is_object() || !p->contains(k)) return nullptr;
    p = &(*p)[k];
  }
  return p->is_number() ? *p : json(nullptr);
}

}  // namespace

json pending_cell(int batch, int input_len) {
  json c = json::object();
  for (const auto& k : kColumns) c[k] = nullptr;
  c["batch_size"] = batch;
  c["input_len"] = input_len;
  c["status"] = "pending";
  c["oom"] = false;
  return c;
}

json cell_from_result(int batch, int input_len, const json& r) {
  json c = pending_cell(batch, input_len);
  for (const char* k :
       {"output_throughput", "total_token_throughput", "p50_ttft_ms", "p95_ttft_ms", "p99_ttft_ms",
        "p50_tpot_ms", "p95_tpot_ms", "p99_tpot_ms", "completed", "failed"}) {
    c[k] = number_at(r, {k});
  }
  const json p50 = number_at(r, {"engine", "performance", "decode", "median_step_ms"});
  const json p95 = number_at(r, {"engine", "performance", "decode", "p95_step_ms"});
  c["step_p50_ms"] = p50;
  c["step_p95_ms"] = p95;
  if (p50.is_number() && p95.is_number()) {
    c["step_jitter_ms"] = p95.get<double>() - p50.get<double>();
  }
  // Demand (weights + KV blocks in use + activations + graphs) tells cells apart; allocated
  // includes a preallocated KV pool, the same in every cell.
  c["peak_demand_bytes"] = number_at(r, {"memory", "peaks", "engine_demand_bytes"});
  c["peak_allocated_bytes"] = number_at(r, {"engine", "oom", "peak_allocated_bytes"});
  if (c["peak_allocated_bytes"].is_null()) {
    c["peak_allocated_bytes"] = number_at(r, {"memory", "peaks", "engine_allocated_bytes"});
  }
  if (r.contains("memory") && r["memory"].contains("peaks")) {
    for (const auto& [k, v] : r["memory"]["peaks"].items()) {
      if (k.rfind("gpu", 0) == 0 && k.ends_with("_used_bytes") &&
          k.find("process") == std::string::npos && v.is_number()) {
        c["nvml_peak_used_bytes"] = v;
        break;
      }
    }
  }
  c["fragmentation"] =
      number_at(r, {"memory", "allocations", "external_fragmentation_max_over_steps"});
  const json oom =
      r.contains("engine") && r["engine"].contains("oom") ? r["engine"]["oom"] : json();
  const bool is_oom = oom.is_object() && oom.value("oom", false);
  c["oom"] = is_oom;
  if (oom.is_object()) {
    c["steps_before_oom"] = oom["steps_before_oom"];
    c["preemptions"] = oom["preemptions"];
    c["first_preemption_step"] = oom["first_preemption_step"];
    if (is_oom) c["message"] = oom["message"];
  }
  if (c["completed"].is_number() && c["completed"].get<double>() == 0) {
    // Nothing completed (an OOM before the first request finished): no latency or throughput.
    for (const char* k : {"output_throughput", "total_token_throughput", "p50_ttft_ms",
                          "p95_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p95_tpot_ms", "p99_tpot_ms",
                          "step_p50_ms", "step_p95_ms", "step_jitter_ms"}) {
      c[k] = nullptr;
    }
  }
  c["status"] = is_oom ? "oom" : r.value("interrupted", false) ? "interrupted" : "ok";
  if (!is_oom && c["failed"].is_number() && c["failed"].get<double>() > 0) c["status"] = "error";
  return c;
}

std::string grid_csv(const json& cells) {
  std::string s;
  for (size_t i = 0; i < kColumns.size(); ++i) s += (i ? "," : "") + kColumns[i];
  s += "\n";
  for (const auto& c : cells) {
    for (size_t i = 0; i < kColumns.size(); ++i) {
      const json& v = c.contains(kColumns[i]) ? c[kColumns[i]] : json();
      std::string field;
      if (v.is_string()) {
        field = v.get<std::string>();
        if (field.find_first_of(",\"\n") != std::string::npos) {
          std::string q = "\"";
          for (char ch : field) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
          field = q + "\"";
        }
      } else if (v.is_boolean()) {
        field = v.get<bool>() ? "true" : "false";
      } else if (v.is_number_integer()) {
        field = std::to_string(v.get<int64_t>());
      } else if (v.is_number()) {
        field = fmt::format("{:.6g}", v.get<double>());
      }
      s += (i ? "," : "") + field;
    }
    s += "\n";
  }
  return s;
}

std::string grid_markdown(const json& cells) {
  auto f = [](const json& v, const char* spec) -> std::string {
    if (!v.is_number()) return "-";
    return fmt::format(fmt::runtime(spec), v.get<double>());
  };
  std::string s =
      "| batch | input | status | out tok/s | total tok/s | TTFT p50/p95/p99 ms | TPOT "
      "p50/p95/p99 ms | step jitter ms | demand GiB | allocated GiB | frag | OOM (steps before) | "
      "preempt |\n"
      "|---:|---:|---|---:|---:|---|---|---:|---:|---:|---:|---|---:|\n";
  for (const auto& c : cells) {
    auto gib = [](const json& v) {
      return v.is_number() ? fmt::format("{:.3f}", v.get<double>() / kGiB) : std::string("-");
    };
    const std::string demand = gib(c.value("peak_demand_bytes", json()));
    const std::string peak = gib(c["peak_allocated_bytes"]);
    const std::string oom =
        c["oom"].get<bool>() ? fmt::format("yes ({})", f(c["steps_before_oom"], "{:.0f}")) : "no";
    s += fmt::format(
        "| {} | {} | {} | {} | {} | {}/{}/{} | {}/{}/{} | {} | {} | {} | {} | {} | {} |\n",
        c["batch_size"].get<int>(), c["input_len"].get<int>(), c["status"].get<std::string>(),
        f(c["output_throughput"], "{:.1f}"), f(c["total_token_throughput"], "{:.1f}"),
        f(c["p50_ttft_ms"], "{:.1f}"), f(c["p95_ttft_ms"], "{:.1f}"), f(c["p99_ttft_ms"], "{:.1f}"),
        f(c["p50_tpot_ms"], "{:.2f}"), f(c["p95_tpot_ms"], "{:.2f}"), f(c["p99_tpot_ms"], "{:.2f}"),
        f(c["step_jitter_ms"], "{:.2f}"), demand, peak, f(c["fragmentation"], "{:.2f}"), oom,
        f(c["preemptions"], "{:.0f}"));
  }
  return s;
}

std::vector<GridHeatmap> grid_heatmaps(const json& cells, const std::vector<int>& batches,
                                       const std::vector<int>& input_lens) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  GridHeatmap tput{"Output throughput", "tok/s", {}, {}, {}, {}};
  GridHeatmap peak{"Peak engine demand (weights + KV in use + activations)", "GiB", {}, {}, {}, {}};
  for (int b : batches) {
    tput.row_labels.push_back(std::to_string(b));
    std::vector<double> tv, pv;
    std::vector<bool> oom;
    for (int l : input_lens) {
      double t = kNaN, p = kNaN;
      bool o = false;
      for (const auto& c : cells) {
        if (c["batch_size"] != b || c["input_len"] != l) continue;
        if (c["output_throughput"].is_number()) t = c["output_throughput"].get<double>();
        const json& demand = c.value("peak_demand_bytes", json());
        const json& bytes = demand.is_number() ? demand : c["peak_allocated_bytes"];
        if (bytes.is_number()) p = bytes.get<double>() / kGiB;
        o = c["oom"].get<bool>();
      }
      tv.push_back(t);
      pv.push_back(p);
      oom.push_back(o);
    }
    tput.values.push_back(tv);
    peak.values.push_back(pv);
    tput.oom.push_back(oom);
    peak.oom.push_back(std::vector<bool>(oom.size(), false));  // the peak is known even at OOM
  }
  for (int l : input_lens) tput.col_labels.push_back(std::to_string(l));
  peak.row_labels = tput.row_labels;
  peak.col_labels = tput.col_labels;
  return {tput, peak};
}

std::string cell_name(int batch, int input_len) {
  return fmt::format("b{}-in{}", batch, input_len);
}

Status create_sweep_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return user_error(fmt::format("--result-dir {}: {}", dir.string(), ec.message()));
  return Ok{};
}

}  // namespace ib::detail
