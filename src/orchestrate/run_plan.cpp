// A RunConfig's workload: the requests, the warm-up count, the KV budget and the derived keys of
// result.json's config.
#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "core/rng.h"
#include "model/tokenizer.h"
#include "orchestrate/orchestrate.h"
#include "workload/lora_assignment.h"

namespace ib {
namespace {

// The CPU KV budget the workload can use at most: every sequence that can be in flight at its
// longest context, plus a block of slack each. Without --kv-cache-memory the pool is sized to
// this (capped by the engine's 2 GiB default) instead of allocating gigabytes a run never touches.
int64_t workload_kv_bytes(const std::vector<RequestSpec>& requests, const RunnerOptions& r,
                          const EngineConfig& engine, const ModelConfig& model, DType dtype,
                          const std::optional<NativeCalibration>& calibration) {
  int64_t in_flight = r.mode == LoadMode::kStatic ? r.batch_size
                      : r.max_concurrency > 0     ? r.max_concurrency
                                                  : static_cast<int64_t>(requests.size());
  in_flight = std::min<int64_t>(in_flight, engine.max_num_seqs);
  int64_t max_context = 0;
  for (const auto& q : requests) {
    max_context = std::max<int64_t>(max_context, q.input_len + q.output_len);
  }
  if (calibration) {  // one prompt at a time, each with one generated token
    for (const auto& p : calibration->prompts) {
      max_context = std::max<int64_t>(max_context, static_cast<int64_t>(p.size()) + 1);
    }
  }
  const int64_t blocks = (max_context + engine.block_size - 1) / engine.block_size + 1;
  const Result<DType> kv = kv_cache_dtype_for(engine.kv_cache_dtype, dtype);  // --kv-cache-dtype
  return in_flight * blocks * engine.block_size * model.kv_bytes_per_token(kv.ok() ? *kv : dtype);
}

// The calibration prompts (--calibration), each fitting the context with its generated token.
Status draw_calibration_prompts(RunPlan& p, const Tokenizer& tokenizer) {
  std::optional<NativeCalibration>& c = p.target.native.calibration;
  if (!c) return Ok{};
  IB_ASSIGN_OR_RETURN(c->prompts, dataset_prompts(p.workload, tokenizer, p.calibration_prompts));
  return check_prompts_fit(c->prompts, p.max_model_len, p.model.name, p.workload.dataset_path);
}

// n split over count parts as evenly as possible: part index's size (they sum to n).
int share_of(int n, int index, int count) {
  return n / count + (index < n % count ? 1 : 0);
}

// One client of a --num-clients run: every client_count-th request of the whole workload from
// client_index on (the whole workload is the same in every client: its seed), a share of the
// concurrency and the warm-ups (the shares sum to what was asked), the rate divided (the sum of
// independent Poisson arrivals is Poisson at the summed rate), and its own arrival seed.
void take_client_share(RunPlan& p) {
  const int index = p.client_index;
  const int count = p.client_count;
  std::vector<RequestSpec> mine;
  for (size_t j = static_cast<size_t>(index); j < p.requests.size(); j += count) {
    mine.push_back(std::move(p.requests[j]));
  }
  p.requests = std::move(mine);
  p.workload.num_prompts = static_cast<int>(p.requests.size());
  RunnerOptions& r = p.runner;
  if (r.max_concurrency > 0) r.max_concurrency = share_of(r.max_concurrency, index, count);
  if (std::isfinite(r.request_rate)) r.request_rate /= count;
  if (r.num_warmups > 0) r.num_warmups = share_of(r.num_warmups, index, count);
  r.seed = counter_hash(r.seed, 0x636c69656e74, static_cast<uint64_t>(index));  // "client"
}

std::string describe_load(const RunnerOptions& r) {
  switch (r.mode) {
    case LoadMode::kStatic:
      return fmt::format("static batches of {}", r.batch_size);
    case LoadMode::kClosed:
      return fmt::format("closed loop at concurrency {}", r.max_concurrency);
    case LoadMode::kOpen: {
      std::string s =
          std::isinf(r.request_rate)
              ? std::string("open loop, all requests at once")
              : fmt::format("open loop at {} req/s, burstiness {}", r.request_rate, r.burstiness);
      if (r.max_concurrency > 0) s += fmt::format(", max concurrency {}", r.max_concurrency);
      return s;
    }
  }
  return "?";
}

// Requests with images: prepared for the model (native) before the context check counts their
// visual tokens, the metrics then summarising them; or for an HTTP target, their chat image_url
// parts built (cli/run_options.cpp), the server's visual tokens in its usage only.
Status prepare_request_images(RunPlan& p) {
  const bool images = std::any_of(p.requests.begin(), p.requests.end(),
                                  [](const RequestSpec& r) { return !r.images.empty(); });
  if (!images) return Ok{};
  if (!p.prepare_images) {
    return user_error("the workload holds images and model '" + p.model.name +
                      "' has no vision tower; use a vision-language model (LLaVA or Qwen2-VL)");
  }
  IB_TRY(p.prepare_images(p.requests));
  p.metrics.vision = p.backend == "native";
  return Ok{};
}

}  // namespace

Result<RunPlan> plan_run(const RunConfig& config, const PluginRegistry& registry) {
  RunPlan p;
  static_cast<RunConfig&>(p) = config;
  IB_ASSIGN_OR_RETURN(const auto make_requests,
                      registry.factory<WorkloadFactory>(config.workload_plugin));
  const auto tokenizer = make_byte_tokenizer();
  IB_ASSIGN_OR_RETURN(p.requests, make_requests(p.workload, *tokenizer));
  IB_TRY(prepare_request_images(p));
  IB_TRY(check_context_fits(p.requests, p.max_model_len, p.model.name));
  if (!p.lora_names.empty()) {
    IB_ASSIGN_OR_RETURN(const LoraAssignment assignment, parse_lora_assignment(p.lora_assignment));
    const std::vector<std::string> names = assign_lora_adapters(
        static_cast<int>(p.requests.size()), p.lora_names, assignment, p.workload.seed);
    for (size_t i = 0; i < p.requests.size(); ++i) p.requests[i].lora_name = names[i];
  }
  IB_TRY(draw_calibration_prompts(p, *tokenizer));
  if (p.client_count > 1) take_client_share(p);

  RunnerOptions& r = p.runner;
  const int batch =
      r.mode == LoadMode::kStatic || r.max_concurrency == 0 ? r.batch_size : r.max_concurrency;
  if (r.num_warmups < 0) r.num_warmups = std::max(1, std::min(batch, p.workload.num_prompts));
  IB_TRY(validate_runner_options(r));
  p.load_description = describe_load(r);

  EngineConfig& engine = p.target.native.engine;
  engine.static_batch_size = r.batch_size;
  engine.cpu_kv_cache_bytes =
      p.kv_cache_bytes
          ? *p.kv_cache_bytes
          : std::min(engine.cpu_kv_cache_bytes,
                     workload_kv_bytes(p.requests, r, engine, p.model,
                                       p.target.native.backend.dtype, p.target.native.calibration));

  nlohmann::json& c = p.config;
  c["batch_size"] = r.batch_size;
  c["num_prompts"] = p.workload.num_prompts;
  c["input_len"] = p.workload.input_len.describe();
  c["output_len"] = p.workload.output_len.describe();
  c["num_warmups"] = r.num_warmups;
  c["load_mode"] = load_mode_name(r.mode);
  c["load_description"] = p.load_description;
  c["max_num_seqs"] = engine.max_num_seqs;
  c["kv_cache_memory_bytes"] = engine.cpu_kv_cache_bytes;
  c["result_dir"] = p.result_dir.string();
  c["overwrite"] = p.overwrite;
  if (p.num_clients > 1) c["num_clients"] = p.num_clients;
  if (p.slurm_clients) {
    c["client_launcher"] = "slurm";
    if (!p.slurm_clients->partition.empty()) c["slurm_partition"] = p.slurm_clients->partition;
    if (!p.slurm_clients->extra.empty()) c["slurm_arg"] = p.slurm_clients->extra;
  }
  if (!p.lora_names.empty()) {
    c["lora_adapters"] = p.lora_names;
    c["lora_assignment"] = p.lora_assignment;
  }
  return p;
}

}  // namespace ib
