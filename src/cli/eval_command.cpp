// `inferbench eval`: the accuracy a quantization gives up, measured against the same model
// unquantized on the same prompts, as llama.cpp's KL-divergence tool measures it: the reference
// generates greedily and keeps every step's logits; the candidate then sees exactly the
// reference's context at each step (the prompt plus the reference's tokens so far, one request
// per step, teacher-forced) and its next-token distribution is compared with the reference's:
// KL(reference || candidate) per token (mean, p99, max, in nats) and top-1 agreement. The two
// engines run one after the other, so the device holds one model at a time.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/local_engine.h"
#include "core/rng.h"
#include "engine/engine.h"
#include "model/presets.h"

namespace ib {
namespace {

struct Run {
  std::vector<std::vector<int32_t>> tokens;             // per prompt
  std::vector<std::vector<std::vector<float>>> logits;  // per prompt, per step
};

// log-softmax in double.
std::vector<double> log_softmax(const std::vector<float>& logits) {
  double max = -INFINITY;
  for (float v : logits) max = std::max(max, double{v});
  double sum = 0;
  for (float v : logits) sum += std::exp(double{v} - max);
  const double lse = max + std::log(sum);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = double{logits[i]} - lse;
  return out;
}

}  // namespace

double kl_divergence(const std::vector<float>& reference, const std::vector<float>& candidate) {
  IB_ASSERT(reference.size() == candidate.size(), "kl_divergence: vocabularies differ");
  const std::vector<double> p = log_softmax(reference), q = log_softmax(candidate);
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (std::isfinite(p[i])) kl += std::exp(p[i]) * (p[i] - q[i]);
  }
  return std::max(kl, 0.0);
}

namespace {

// Runs requests to completion on one engine built for this run's quantization; returns each
// request's tokens and logits in request order.
Result<Run> run_engine(const EvalFlags& f, const ModelConfig& model,
                       const std::string& quantization, const std::string& kv_cache_dtype,
                       const std::vector<std::vector<int32_t>>& prompts, int max_tokens) {
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const int total = static_cast<int>(longest) + max_tokens;
  EngineConfig ec;
  ec.max_num_seqs = std::min<int>(64, static_cast<int>(prompts.size()));
  ec.max_num_batched_tokens = std::max(total * 4, 256);
  ec.num_kv_blocks = ec.max_num_seqs * ((total + ec.block_size - 1) / ec.block_size + 1);
  ec.capture_logits = true;
  ec.use_graphs = !f.no_cuda_graphs;
  ec.quantization = quantization;
  ec.kv_cache_dtype = kv_cache_dtype;
  IB_TRY(ec.validate());
  IB_ASSIGN_OR_RETURN(LocalEngine local, open_local_engine(model, f.model, f.device, f.dtype,
                                                           f.load_format, f.seed, ec));
  Engine* engine = local.engine.get();
  Run run;
  run.tokens.resize(prompts.size());
  run.logits.resize(prompts.size());
  size_t next = 0;
  int live = 0;
  const auto submit = [&]() -> Status {
    while (next < prompts.size() && live < ec.max_num_seqs) {
      GenerationRequest req;
      req.id = next;
      req.prompt_tokens = prompts[next];
      req.max_tokens = max_tokens;
      IB_TRY(engine->add_request(req));
      ++next;
      ++live;
    }
    return Ok{};
  };
  IB_TRY(submit());
  while (engine->has_unfinished()) {
    IB_ASSIGN_OR_RETURN(StepOutput out, engine->step());
    for (TokenEvent& e : out.events) {
      run.tokens[e.request_id].push_back(e.token);
      run.logits[e.request_id].push_back(std::move(e.logits));
      if (e.finish != FinishReason::kNone) --live;
    }
    IB_TRY(submit());
  }
  return run;
}

// "fp8", or "none, kv fp8" when the KV cache is not the model dtype.
std::string variant_name(const std::string& quantization, const std::string& kv_cache_dtype) {
  return kv_cache_dtype == "auto" ? quantization : quantization + ", kv " + kv_cache_dtype;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto at = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(at, v.size() - 1)];
}

}  // namespace

void add_eval_flags(CLI::App& app, EvalFlags& f) {
  app.add_option("--model", f.model, "preset name or a directory with config.json (+ safetensors)")
      ->required();
  app.add_option("--quantization", f.quantization, "the candidate: none or fp8")
      ->capture_default_str();
  app.add_option("--reference-quantization", f.reference, "the reference: none or fp8")
      ->capture_default_str();
  app.add_option("--kv-cache-dtype", f.kv_cache_dtype, "the candidate's KV cache: auto, fp8")
      ->capture_default_str();
  app.add_option("--reference-kv-cache-dtype", f.reference_kv_cache_dtype,
                 "the reference's KV cache: auto, fp8")
      ->capture_default_str();
  app.add_option("--num-prompts", f.num_prompts, "prompts (random token ids from --seed)")
      ->capture_default_str();
  app.add_option("--input-len", f.input_len, "tokens per prompt")->capture_default_str();
  app.add_option("--output-len", f.output_len, "steps compared per prompt")->capture_default_str();
  app.add_option("--device", f.device, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--dtype", f.dtype, "auto (fp32 on cpu, bf16 on cuda), fp32, bf16, fp16")
      ->capture_default_str();
  app.add_option("--load-format", f.load_format, "auto, dummy or safetensors")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "seed of the prompts and of dummy weights")
      ->capture_default_str();
  app.add_option("--output-json", f.output_json, "also write the numbers here (JSON)");
  app.add_flag("--no-cuda-graphs,--enforce-eager", f.no_cuda_graphs, "decode op by op");
}

Result<int> execute_eval(const EvalFlags& f) {
  IB_ASSIGN_OR_RETURN(const ModelConfig model, resolve_model(f.model));
  IB_TRY(model.check_supported());
  if (f.num_prompts <= 0 || f.input_len <= 0 || f.output_len <= 0) {
    return user_error("--num-prompts, --input-len and --output-len must be positive");
  }
  // The prompts: random ids below the vocabulary (the reference's own text comes after).
  Rng rng(f.seed);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(f.num_prompts));
  for (auto& p : prompts) {
    for (int i = 0; i < f.input_len; ++i)
      p.push_back(static_cast<int32_t>(rng.uniform_int(1, model.vocab_size - 1)));
  }
  const std::string reference = variant_name(f.reference, f.reference_kv_cache_dtype);
  const std::string candidate = variant_name(f.quantization, f.kv_cache_dtype);
  std::cerr << fmt::format("eval: reference ({}) generating {} x {} tokens\n", reference,
                           f.num_prompts, f.output_len);
  IB_ASSIGN_OR_RETURN(const Run ref, run_engine(f, model, f.reference, f.reference_kv_cache_dtype,
                                                prompts, f.output_len));
  // The candidate sees the reference's context at every step.
  std::vector<std::vector<int32_t>> contexts;
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (int s = 0; s < f.output_len; ++s) {
      std::vector<int32_t> c = prompts[p];
      c.insert(c.end(), ref.tokens[p].begin(), ref.tokens[p].begin() + s);
      contexts.push_back(std::move(c));
    }
  }
  std::cerr << fmt::format("eval: candidate ({}) on {} teacher-forced contexts\n", candidate,
                           contexts.size());
  IB_ASSIGN_OR_RETURN(const Run cand,
                      run_engine(f, model, f.quantization, f.kv_cache_dtype, contexts, 1));
  std::vector<double> kl;
  int agree = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (int s = 0; s < f.output_len; ++s) {
      const size_t c = p * static_cast<size_t>(f.output_len) + static_cast<size_t>(s);
      kl.push_back(kl_divergence(ref.logits[p][static_cast<size_t>(s)], cand.logits[c][0]));
      agree += cand.tokens[c][0] == ref.tokens[p][static_cast<size_t>(s)];
    }
  }
  double mean = 0;
  for (double v : kl) mean += v;
  mean /= static_cast<double>(kl.size());
  const nlohmann::json j{
      {"model", model.name},
      {"reference", f.reference},
      {"candidate", f.quantization},
      {"reference_kv_cache_dtype", f.reference_kv_cache_dtype},
      {"candidate_kv_cache_dtype", f.kv_cache_dtype},
      {"device", f.device},
      {"tokens", kl.size()},
      {"kl_mean", mean},
      {"kl_p99", percentile(kl, 0.99)},
      {"kl_max", *std::max_element(kl.begin(), kl.end())},
      {"top1_agreement", static_cast<double>(agree) / static_cast<double>(kl.size())}};
  std::cout << fmt::format(
      "| model | reference | candidate | tokens | KL mean | KL p99 | KL max | top-1 |\n"
      "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n"
      "| {} | {} | {} | {} | {:.6f} | {:.6f} | {:.6f} | {:.4f} |\n",
      model.name, reference, candidate, kl.size(), j["kl_mean"].get<double>(),
      j["kl_p99"].get<double>(), j["kl_max"].get<double>(), j["top1_agreement"].get<double>());
  if (!f.output_json.empty()) {  // written whole, then renamed: never half a file
    const std::string tmp = f.output_json + ".tmp";
    {
      std::ofstream out(tmp);
      if (!out) return user_error(fmt::format("--output-json {}: cannot create it", f.output_json));
      out << j.dump(2) << "\n";
      if (!out) return runtime_error(fmt::format("--output-json {}: write failed", f.output_json));
    }
    std::filesystem::rename(tmp, f.output_json);
  }
  return kExitOk;
}

}  // namespace ib
