// The suite leaderboard: one row per entry, ranked by output throughput; Markdown, CSV, HTML.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/text.h"
#include "suite/suite.h"

namespace ib {
namespace {

using nlohmann::json;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::optional<double> number_at(const json& j, const json::json_pointer& ptr) {
  if (!j.is_object() || !j.contains(ptr)) return std::nullopt;
  const json& v = j.at(ptr);
  if (!v.is_number()) return std::nullopt;
  return v.get<double>();
}

std::string fixed(const std::optional<double>& v, int digits) {
  return v ? fmt::format("{:.{}f}", *v, digits) : "";
}

std::string params_text(int64_t n) {
  if (n <= 0) return "";
  if (n >= 1'000'000'000) return fmt::format("{:.2f}B", static_cast<double>(n) / 1e9);
  return fmt::format("{:.1f}M", static_cast<double>(n) / 1e6);
}

// "30.4 KiB", or for a latent cache "30.4 KiB (GQA 270.0 KiB)".
std::string kv_cell(const LeaderboardRow& r) {
  if (!r.kv_bytes_per_token) return "";
  std::string cell = fmt::format("{:.1f} KiB", *r.kv_bytes_per_token / 1024.0);
  if (r.kv_bytes_per_token_gqa && *r.kv_bytes_per_token_gqa != *r.kv_bytes_per_token)
    cell += fmt::format(" (GQA {:.1f} KiB)", *r.kv_bytes_per_token_gqa / 1024.0);
  return cell;
}

std::string percent(const std::optional<double>& v) {
  return v ? fmt::format("{:.1f}%", 100.0 * *v) : "";
}

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// A KL cell: "-" where the entry measured nothing (no eval, or it failed).
std::string kl_cell(const std::optional<double>& v) {
  return v ? fmt::format("{:.4g}", *v) : "-";
}

std::string perplexity_cell(const LeaderboardRow& r) {
  if (!r.perplexity) return "-";
  return fmt::format("{:.3f} ({:.3f})", *r.perplexity, r.reference_perplexity.value_or(NAN));
}

// Display cells in column order.
std::vector<std::string> cells(const LeaderboardRow& r, size_t rank) {
  std::string peak = fixed(r.peak_gib, 2);
  if (!peak.empty() && !r.peak_source.empty()) peak += " (" + r.peak_source + ")";
  return {rank > 0 ? std::to_string(rank) : "-",
          r.entry,
          r.model,
          params_text(r.parameters),
          r.precision,
          fixed(r.output_tok_s, 1),
          fixed(r.ttft_median_ms, 2),
          fixed(r.ttft_p99_ms, 2),
          fixed(r.engine_peak_gib, 2),
          kv_cell(r),
          peak,
          fixed(r.tokens_per_joule, 2),
          percent(r.bandwidth_share),
          kl_cell(r.kl_mean),
          kl_cell(r.kl_p99),
          r.top1_agreement ? percent(r.top1_agreement) : "-",
          perplexity_cell(r),
          r.status};
}

const std::vector<std::string> kHeader = {"#",
                                          "entry",
                                          "model",
                                          "params",
                                          "precision",
                                          "output tok/s",
                                          "TTFT median ms",
                                          "TTFT P99 ms",
                                          "engine peak GiB",
                                          "KV per token",
                                          "peak GiB (source)",
                                          "tok/J",
                                          "bandwidth share",
                                          "KL mean",
                                          "KL p99",
                                          "top-1",
                                          "PPL (ref)",
                                          "status"};

// Right-aligned: the rank and every number (all but entry, model, precision and status).
bool numeric_column(size_t i) {
  return i == 0 || (i >= 3 && i + 1 < kHeader.size() && i != 4);
}

}  // namespace

LeaderboardRow leaderboard_row(const SuiteEntry& entry, const EntryState* state, const json& result,
                               const json& eval, int64_t parameters) {
  LeaderboardRow r;
  r.entry = entry.name;
  r.model = entry.model;
  r.parameters = parameters;
  r.precision = entry.dtype;
  // Until a result says otherwise, the entry's own --quantization (a pending fp8 or awq entry is
  // not shown as its activations' dtype).
  for (size_t i = 0; i + 1 < entry.args.size(); ++i) {
    if (entry.args[i] == "--quantization") r.precision = entry.args[i + 1];
  }
  if (state == nullptr) {
    r.status = "pending";
    return r;
  }
  r.status = state->status;
  if (state->status == "failed") r.status = "failed: " + state->error;
  if (!result.is_object()) return r;
  const json& config = result.value("config", json::object());
  if (config.contains("dtype") && config["dtype"].is_string()) {
    r.precision = config["dtype"].get<std::string>();
  }
  if (config.contains("quantization") && config["quantization"].is_string()) {
    r.precision = config["quantization"].get<std::string>();  // e.g. fp8 (--quantization)
  }
  if (config.contains("calibration") && config["calibration"].is_string()) {
    // "int8-w8a8, static minmax asymmetric" (--calibration, --calibration-scheme)
    r.precision += ", static " + config["calibration"].get<std::string>();
    if (config.contains("calibration_percentile") && config["calibration_percentile"].is_number()) {
      r.precision += fmt::format(" {}", config["calibration_percentile"].get<double>());
    }
    if (config.contains("calibration_scheme") && config["calibration_scheme"].is_string()) {
      r.precision += " " + config["calibration_scheme"].get<std::string>();
    }
  }
  if (config.contains("kv_cache_dtype") && config["kv_cache_dtype"].is_string() &&
      config["kv_cache_dtype"].get<std::string>() != "auto") {
    r.precision += ", KV " + config["kv_cache_dtype"].get<std::string>();  // e.g. "bf16, KV fp8"
  }
  if (config.contains("tensor_parallel_size") && config["tensor_parallel_size"].is_number()) {
    r.precision += fmt::format(", TP {}", config["tensor_parallel_size"].get<int>());
  }
  if (config.contains("block_sparse_attention") && config["block_sparse_attention"].is_object()) {
    const json& b = config["block_sparse_attention"];  // e.g. "bf16, block-sparse 64/16/8"
    r.precision += fmt::format(", block-sparse {}/{}/{}", b.value("block_size", 0),
                               b.value("local_blocks", 0), b.value("vert_stride", 0));
  }
  r.output_tok_s = number_at(result, json::json_pointer("/output_throughput"));
  r.ttft_median_ms = number_at(result, json::json_pointer("/median_ttft_ms"));
  r.ttft_p99_ms = number_at(result, json::json_pointer("/p99_ttft_ms"));
  if (auto demand = number_at(result, json::json_pointer("/memory/peaks/engine_demand_bytes"))) {
    r.engine_peak_gib = *demand / kGiB;
  }
  // Tensor parallelism: what one GPU must hold, the largest rank's demand.
  for (int rank = 0;; ++rank) {
    const auto demand = number_at(
        result, json::json_pointer(fmt::format("/memory/peaks/rank{}_demand_bytes", rank)));
    if (!demand) break;
    if (rank == 0 || *demand / kGiB > *r.engine_peak_gib) r.engine_peak_gib = *demand / kGiB;
  }
  r.kv_bytes_per_token = number_at(result, json::json_pointer("/engine/engine/kv_bytes_per_token"));
  r.kv_bytes_per_token_gqa =
      number_at(result, json::json_pointer("/engine/engine/kv_bytes_per_token_gqa"));
  if (auto gpu = number_at(result, json::json_pointer("/memory/peaks/gpus_used_bytes"))) {
    r.peak_gib = *gpu / kGiB;
    r.peak_source = "gpu";
  } else if (auto rss = number_at(result, json::json_pointer("/memory/peaks/rss_bytes"))) {
    r.peak_gib = *rss / kGiB;
    r.peak_source = "rss";
  }
  if (result.contains("energy") && result["energy"].value("available", false)) {
    r.tokens_per_joule = number_at(result, json::json_pointer("/energy/output_tokens_per_joule"));
  }
  // Only where the engine measured the device's copy ceiling (CUDA); the CPU reports none.
  const auto ceiling =
      number_at(result, json::json_pointer("/engine/performance/copy_ceiling_bytes_per_s"));
  if (ceiling && *ceiling > 0) {
    r.bandwidth_share = number_at(
        result, json::json_pointer("/engine/performance/decode/fraction_of_copy_ceiling"));
  }
  if (result.contains("stability") && state->status == "ok") {
    const json& unstable = result["stability"].value("unstable_metrics", json::array());
    std::vector<std::string> names;
    for (const auto& key : {"output_throughput", "median_ttft_ms", "p99_ttft_ms"}) {
      if (std::find(unstable.begin(), unstable.end(), json(key)) != unstable.end()) {
        names.emplace_back(key);
      }
    }
    if (!names.empty()) {
      r.status = fmt::format("ok, unstable (CV > {:.0f}%: {})",
                             100.0 * result["stability"].value("cv_threshold", 0.05),
                             fmt::join(names, ", "));
    }
  }
  if (result.value("interrupted", false)) r.status = "interrupted";
  if (eval.is_object()) {
    r.kl_mean = number_at(eval, json::json_pointer("/kl_mean"));
    r.kl_p99 = number_at(eval, json::json_pointer("/kl_p99"));
    r.top1_agreement = number_at(eval, json::json_pointer("/top1_agreement"));
    r.perplexity = number_at(eval, json::json_pointer("/perplexity/candidate"));
    r.reference_perplexity = number_at(eval, json::json_pointer("/perplexity/reference"));
  }
  return r;
}

void rank_rows(std::vector<LeaderboardRow>& rows) {
  std::stable_sort(rows.begin(), rows.end(), [](const LeaderboardRow& a, const LeaderboardRow& b) {
    const bool ra = a.output_tok_s.has_value();
    const bool rb = b.output_tok_s.has_value();
    if (ra != rb) return ra;
    if (!ra) return false;
    return *a.output_tok_s > *b.output_tok_s;
  });
}

std::string leaderboard_markdown(const std::vector<LeaderboardRow>& rows,
                                 const std::string& title) {
  std::string out = fmt::format("### {}\n\n|", title);
  std::string rule = "|";
  for (size_t i = 0; i < kHeader.size(); ++i) {
    out += " " + kHeader[i] + " |";
    rule += numeric_column(i) ? " ---: |" : " --- |";
  }
  out += "\n" + rule + "\n";
  size_t rank = 0;
  for (const auto& r : rows) {
    const auto c = cells(r, r.output_tok_s ? ++rank : 0);
    out += "|";
    for (const auto& cell : c) {
      std::string escaped;
      for (char ch : cell) escaped += ch == '|' ? std::string("\\|") : std::string(1, ch);
      out += " " + escaped + " |";
    }
    out += "\n";
  }
  return out;
}

std::string leaderboard_csv(const std::vector<LeaderboardRow>& rows) {
  std::string out =
      "rank,entry,model,parameters,precision,output_tok_s,ttft_median_ms,ttft_p99_ms,"
      "engine_peak_gib,kv_bytes_per_token,kv_bytes_per_token_gqa,peak_gib,"
      "peak_source,tokens_per_joule,bandwidth_share,kl_mean,kl_p99,top1_agreement,perplexity,"
      "reference_perplexity,status\n";
  size_t rank = 0;
  const auto num = [](const std::optional<double>& v) {
    return v ? fmt::format("{:.6g}", *v) : std::string();
  };
  for (const auto& r : rows) {
    out += fmt::format(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
        r.output_tok_s ? std::to_string(++rank) : "", csv_cell(r.entry), csv_cell(r.model),
        r.parameters > 0 ? std::to_string(r.parameters) : "", r.precision, num(r.output_tok_s),
        num(r.ttft_median_ms), num(r.ttft_p99_ms), num(r.engine_peak_gib),
        num(r.kv_bytes_per_token), num(r.kv_bytes_per_token_gqa), num(r.peak_gib), r.peak_source,
        num(r.tokens_per_joule), num(r.bandwidth_share), num(r.kl_mean), num(r.kl_p99),
        num(r.top1_agreement), num(r.perplexity), num(r.reference_perplexity), csv_cell(r.status));
  }
  return out;
}

std::string leaderboard_html(const std::vector<LeaderboardRow>& rows, const std::string& title,
                             const std::string& heatmap_svg) {
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{0}</title>\n"
      "<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}"
      "td,th{{border:1px solid #ccc;padding:4px 8px}}td.n{{text-align:right}}"
      "tr.failed{{color:#a00}}</style></head>\n<body><h1>{0}</h1>\n<table>\n<tr>",
      escape_markup(title));
  for (const auto& h : kHeader) out += "<th>" + escape_markup(h) + "</th>";
  out += "</tr>\n";
  size_t rank = 0;
  for (const auto& r : rows) {
    const auto c = cells(r, r.output_tok_s ? ++rank : 0);
    out += r.status.rfind("failed", 0) == 0 ? "<tr class=\"failed\">" : "<tr>";
    for (size_t i = 0; i < c.size(); ++i) {
      out += fmt::format("<td{}>{}</td>", numeric_column(i) ? " class=\"n\"" : "",
                         escape_markup(c[i]));
    }
    out += "</tr>\n";
  }
  out += "</table>\n";
  if (!heatmap_svg.empty()) {
    out += "<h2>Memory over time</h2>\n<p><a href=\"heatmap.html\">interactive heatmap</a></p>\n";
    out += heatmap_svg + "\n";
  }
  return out + "</body></html>\n";
}

}  // namespace ib
