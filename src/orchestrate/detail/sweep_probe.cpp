// Engine probes and the OOM search of `inferbench sweep --find-oom`.
#include "orchestrate/detail/sweep_probe.h"

#include <algorithm>
#include <atomic>

#include <fmt/format.h>

#include "core/clock.h"
#include "core/rng.h"
#include "core/stats.h"
#include "report/grid_report.h"

namespace ib::detail {
namespace {

using nlohmann::json;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

json probe_json(const ProbeResult& p) {
  return json{{"batch", p.batch},
              {"input_len", p.input_len},
              {"ok", p.ok},
              {"oom", p.oom},
              {"steps", p.steps},
              {"steps_before_oom", p.steps_before_oom >= 0 ? json(p.steps_before_oom) : json()},
              {"preemptions", p.preemptions},
              {"first_preemption_step",
               p.first_preemption_step >= 0 ? json(p.first_preemption_step) : json()},
              {"peak_bytes", p.peak_bytes},
              {"kv_blocks", p.kv_blocks},
              {"max_concurrent", p.concurrent},
              {"load_s", p.load_s},
              {"prefill_s", p.prefill_s},
              {"decode_step_s", p.decode_step_s},
              {"total_s", p.total_s},
              {"kv_growths", p.kv_growths},
              {"kv_growths_staged", p.kv_growths_staged},
              {"kv_growth_s", p.kv_growth_s},
              {"message", p.message}};
}

// Doubling from `start`, then bisection, over a value where ok(v) is monotone (true below the
// threshold). Returns the largest ok value (0: none) and whether the cap was reached ok.
template <typename Probe>
Result<std::pair<int, bool>> search(int start, int cap, Probe&& probe_ok) {
  int lo = 0, hi = 0;
  for (int v = start;; v = std::min(cap, v * 2)) {
    IB_ASSIGN_OR_RETURN(const bool ok, probe_ok(v));
    if (!ok) {
      hi = v;
      break;
    }
    lo = v;
    if (v >= cap) return std::make_pair(lo, true);
  }
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    IB_ASSIGN_OR_RETURN(const bool ok, probe_ok(mid));
    (ok ? lo : hi) = mid;
  }
  return std::make_pair(lo, false);
}

}  // namespace

int probe_max_tokens(const ProbeSpec& spec) {
  // The batch enters through chunked prefill, max_num_batched_tokens a step less one token for
  // each sequence already decoding: the first sequences keep generating until the last one is
  // in, so that the whole batch is in flight at once and the budget never decides a probe.
  const int64_t room = std::max(1, spec.engine.max_num_batched_tokens - spec.batch);
  const int64_t admit_steps = (int64_t{spec.batch} * spec.input_len + room - 1) / room;
  return spec.steps + static_cast<int>(std::max<int64_t>(admit_steps, 1)) - 1;
}

Result<ProbeResult> run_probe(Backend& backend, const ProbeSpec& probe_spec) {
  ProbeSpec spec = probe_spec;
  const int max_tokens = probe_max_tokens(spec);
  if (spec.engine.max_model_len > 0)
    spec.engine.max_model_len = std::max(spec.engine.max_model_len, spec.input_len + max_tokens);
  ProbeResult r;
  r.batch = spec.batch;
  r.input_len = spec.input_len;
  const int64_t baseline = backend.memory().snapshot().allocated_bytes;
  backend.memory().reset_peak();
  const int64_t probe_start_ns = now_ns();
  {
    const int64_t t0 = now_ns();
    auto engine = create_engine(spec.model, spec.weights, spec.engine, backend);
    r.load_s = static_cast<double>(now_ns() - t0) * 1e-9;
    if (!engine.ok()) {
      // Nothing fits (weights, or not one KV block under the limit): out of memory at load.
      r.oom = true;
      r.steps_before_oom = 0;
      r.message = engine.error().message;
      r.peak_bytes = backend.memory().snapshot().peak_allocated_bytes - baseline;
    } else {
      Engine& e = **engine;
      const EngineStats start = e.stats();
      r.kv_block_bytes = start.kv_block_bytes;
      r.engine_fixed_bytes =
          start.memory.allocated_bytes - baseline - start.kv_block_bytes * start.kv_blocks_total;
      for (int i = 0; i < spec.batch; ++i) {
        GenerationRequest q;
        q.id = static_cast<uint64_t>(i);
        q.max_tokens = max_tokens;
        for (int t = 0; t < spec.input_len; ++t) {
          const uint64_t h =
              counter_hash(spec.seed, static_cast<uint64_t>(i), static_cast<uint64_t>(t));
          q.prompt_tokens.push_back(
              static_cast<int32_t>(h % static_cast<uint64_t>(spec.model.vocab_size)));
        }
        if (Status st = e.add_request(std::move(q)); !st.ok()) {
          r.message = st.error().message;  // the request can never fit the pool
          for (int k = 0; k < i; ++k) e.abort_request(static_cast<uint64_t>(k));
          break;
        }
      }
      std::vector<double> decode_ns;
      int max_running = 0;
      bool finished = r.message.empty();
      while (finished && e.has_unfinished()) {
        IB_ASSIGN_OR_RETURN(const StepOutput out, e.step());
        const double ns = static_cast<double>(out.stats.duration_ns);
        if (e.stats().steps == 1)
          r.prefill_s = ns * 1e-9;
        else
          decode_ns.push_back(ns);
        const EngineStats s = e.stats();
        max_running = std::max(max_running, s.num_running);
        // Requests left waiting although the step had token budget to spare: the pool is short
        // (the rest of the batch would only run after the first finished).
        const bool queued =
            s.num_waiting > 0 && out.stats.num_prefill_tokens + out.stats.num_decode_tokens <
                                     spec.engine.max_num_batched_tokens;
        if (out.stats.oom || (spec.stop_at_preemption && (s.preemptions > 0 || queued))) {
          finished = false;
          break;
        }
      }
      const EngineStats s = e.stats();
      r.steps = s.steps;
      r.oom = s.oom;
      r.steps_before_oom = s.oom_step;
      if (s.oom) r.message = s.oom_message;
      r.preemptions = s.preemptions;
      r.first_preemption_step = s.first_preemption_step;
      r.kv_blocks = s.kv_blocks_total;
      r.kv_growths = s.kv_growths;
      r.kv_growths_staged = s.kv_growths_staged;
      r.kv_growth_s = s.kv_growth_s;
      r.peak_bytes = s.memory.peak_allocated_bytes - baseline;
      // The whole batch must have run at once: a pool that only queues part of it is short too.
      r.concurrent = max_running;
      r.ok = finished && !s.oom && s.preemptions == 0 && max_running == spec.batch;
      if (!decode_ns.empty()) r.decode_step_s = median(decode_ns) * 1e-9;
    }
  }  // the engine and everything it allocated are gone here
  const int64_t after = backend.memory().snapshot().allocated_bytes;
  r.total_s = static_cast<double>(now_ns() - probe_start_ns) * 1e-9;
  if (after != baseline) {
    return runtime_error(fmt::format(
        "probe batch {} input {}: {} bytes still allocated after the engine was destroyed (a "
        "leak); report it with the command line",
        spec.batch, spec.input_len, after - baseline));
  }
  return r;
}

Result<json> find_oom(Backend& backend, const OomSearchOptions& o, const std::atomic<bool>& stop) {
  json modes = json::array();
  for (const KvGrowth growth : {KvGrowth::kOnDemand, KvGrowth::kPreallocated}) {
    json mode{{"kv_cache_growth", kv_growth_name(growth)},
              {"criterion", growth == KvGrowth::kOnDemand
                                ? "largest batch whose KV pool growth is never refused"
                                : "largest batch that runs all at once without a preemption"},
              {"batch_search", json::array()}};
    json fixed = nullptr, block = nullptr;
    auto probe = [&](ProbeSpec spec, json& probes, const char* search_name) -> Result<bool> {
      if (stop.load()) return user_error("interrupted");
      spec.engine.kv_growth = growth;
      IB_ASSIGN_OR_RETURN(const ProbeResult r, run_probe(backend, spec));
      std::fprintf(stderr,
                   "inferbench: find-oom %s batch %d input %d: %s (%lld steps, %.2f GiB; %.1f s, "
                   "load %.1f s, %d KV growths %.1f s)\n",
                   kv_growth_name(growth), r.batch, r.input_len,
                   r.ok    ? "ok"
                   : r.oom ? "oom"
                           : "pool full",
                   static_cast<long long>(r.steps), static_cast<double>(r.peak_bytes) / kGiB,
                   r.total_s, r.load_s, r.kv_growths, r.kv_growth_s);
      probes.push_back(probe_json(r));
      if (o.on_probe) {
        json line = probes.back();
        line["kv_cache_growth"] = kv_growth_name(growth);
        line["search"] = search_name;
        IB_TRY(o.on_probe(line));
      }
      if (r.engine_fixed_bytes > 0) {
        fixed = r.engine_fixed_bytes;
        block = r.kv_block_bytes;
      }
      return r.ok;
    };
    for (const int len : o.input_lens) {
      ProbeSpec spec = o.base;
      spec.input_len = len;
      spec.engine.max_model_len = len + spec.steps;
      json probes = json::array();
      IB_ASSIGN_OR_RETURN(const auto found, search(1, o.max_batch, [&](int b) {
                            spec.batch = b;
                            return probe(spec, probes, "batch");
                          }));
      std::sort(probes.begin(), probes.end(),
                [](const json& a, const json& b) { return a["batch"] < b["batch"]; });
      mode["batch_search"].push_back(json{{"input_len", len},
                                          {"max_batch", found.first},
                                          {"cap_reached", found.second},
                                          {"engine_fixed_bytes", fixed},
                                          {"kv_block_bytes", block},
                                          {"probes", probes}});
    }
    if (o.context_batch > 0) {
      ProbeSpec spec = o.base;
      spec.batch = o.context_batch;
      const int cap = o.base.model.max_position_embeddings - spec.steps;
      spec.engine.max_model_len = 0;  // the model's context, or what a preallocated pool holds
      json probes = json::array();
      IB_ASSIGN_OR_RETURN(const auto found, search(16, cap, [&](int len) {
                            spec.input_len = len;
                            return probe(spec, probes, "context");
                          }));
      std::sort(probes.begin(), probes.end(),
                [](const json& a, const json& b) { return a["input_len"] < b["input_len"]; });
      mode["context_search"] = json{{"batch", o.context_batch},
                                    {"max_input_len", found.first},
                                    {"cap_reached", found.second},
                                    {"engine_fixed_bytes", fixed},
                                    {"probes", probes}};
    }
    modes.push_back(mode);
  }
  const auto limit = backend.memory().limit_bytes();
  return json{{"model", o.base.model.name},
              {"device", backend.device_info().name},
              {"memory_limit_bytes", limit ? json(*limit) : json()},
              {"steps", o.base.steps},
              {"max_batch_searched", o.max_batch},
              {"modes", modes}};
}

std::string oom_markdown(const json& oom) {
  std::string s = fmt::format("# OOM thresholds: {} on {}\n\n", oom["model"].get<std::string>(),
                              oom["device"].get<std::string>());
  if (oom["memory_limit_bytes"].is_number()) {
    s += fmt::format("Memory limit {:.2f} GiB; ", oom["memory_limit_bytes"].get<double>() / kGiB);
  }
  s += fmt::format(
      "a probe passes when every request of the batch completes {} steps, all in flight at once "
      "(each request generates that many tokens plus one per extra step chunked prefill takes "
      "to admit the whole batch; oom: a KV growth was refused; full: the preallocated pool "
      "preempted or queued part of the batch).\n\n",
      oom["steps"].get<int>());
  s += "| KV growth | input len | max batch | probes (batch: result, steps, peak GiB, seconds; "
       "on demand: KV growths, seconds spent growing) |\n";
  s += "|---|---|---|---|\n";
  for (const auto& m : oom["modes"]) {
    for (const auto& b : m["batch_search"]) {
      std::string probes;
      for (const auto& p : b["probes"]) {
        probes += fmt::format("{}{}: {} {} {:.3f} {:.1f}s", probes.empty() ? "" : "; ",
                              p["batch"].get<int>(),
                              p["ok"].get<bool>() ? "ok" : (p["oom"].get<bool>() ? "oom" : "full"),
                              p["steps"].get<int64_t>(), p["peak_bytes"].get<double>() / kGiB,
                              p["total_s"].get<double>());
        if (m["kv_cache_growth"] == "on-demand") {
          probes += fmt::format(", {} growths {:.2f}s", p["kv_growths"].get<int>(),
                                p["kv_growth_s"].get<double>());
        }
      }
      s += fmt::format("| {} | {} | {}{} | {} |\n", m["kv_cache_growth"].get<std::string>(),
                       b["input_len"].get<int>(), b["max_batch"].get<int>(),
                       b["cap_reached"].get<bool>() ? " (cap)" : "", probes);
    }
  }
  for (const auto& m : oom["modes"]) {
    if (!m.contains("context_search")) continue;
    const json& c = m["context_search"];
    s += fmt::format("\nLongest input at batch {} ({}): {} tokens{}.\n", c["batch"].get<int>(),
                     m["kv_cache_growth"].get<std::string>(), c["max_input_len"].get<int>(),
                     c["cap_reached"].get<bool>() ? " (the model's context)" : "");
  }
  return s;
}

std::string oom_headroom_svg(const json& oom) {
  std::vector<LineSeries> series;
  for (const auto& m : oom["modes"]) {
    for (const auto& b : m["batch_search"]) {
      LineSeries sr;
      sr.name = fmt::format("{}, in {}", m["kv_cache_growth"].get<std::string>(),
                            b["input_len"].get<int>());
      for (const auto& p : b["probes"]) {
        sr.x.push_back(p["batch"].get<double>());
        sr.y.push_back(p["peak_bytes"].get<double>() / kGiB);
      }
      series.push_back(std::move(sr));
    }
  }
  const double limit =
      oom["memory_limit_bytes"].is_number() ? oom["memory_limit_bytes"].get<double>() / kGiB : 0;
  return line_chart_svg("Headroom: peak tracked memory vs batch", "batch size", "peak GiB", series,
                        limit, "memory limit");
}

}  // namespace ib::detail
