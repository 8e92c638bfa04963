// `inferbench eval`: the accuracy a quantization gives up, measured against the same model
// unquantized on the same prompts, as llama.cpp's KL-divergence tool measures it: the reference
// generates greedily and keeps every step's logits; the candidate then sees exactly the
// reference's context at each step (the prompt plus the reference's tokens so far, one request
// per step, teacher-forced) and its next-token distribution is compared with the reference's:
// KL(reference || candidate) per token (mean, p99, max, in nats) and top-1 agreement. With --text
// each engine also scores a text file's chunks (eval_perplexity.cpp): both perplexities, their
// ratio and difference. The two engines run one after the other, so the device holds one model
// at a time.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/detail/eval.h"
#include "cli/engine_flags.h"
#include "cli/local_engine.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "engine/calibration.h"
#include "engine/engine.h"
#include "model/presets.h"

namespace ib {

double kl_divergence(const std::vector<float>& reference, const std::vector<float>& candidate) {
  IB_ASSERT(reference.size() == candidate.size(), "kl_divergence: vocabularies differ");
  const double lse_p = detail::log_sum_exp(reference), lse_q = detail::log_sum_exp(candidate);
  double kl = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const double p = double{reference[i]} - lse_p, q = double{candidate[i]} - lse_q;
    if (std::isfinite(p)) kl += std::exp(p) * (p - q);
  }
  return std::max(kl, 0.0);
}

namespace {

struct Run {
  std::vector<std::vector<int32_t>> tokens;             // per prompt
  std::vector<std::vector<std::vector<float>>> logits;  // per prompt, per step
  std::optional<detail::Perplexity> perplexity;         // with --text
};

// One engine for this run's quantization and dtype: runs the prompts to completion (each
// request's tokens and logits in request order), then scores the text's chunks when given.
Result<Run> run_engine(const EvalFlags& f, const ModelConfig& model,
                       const std::string& quantization, const std::string& dtype,
                       const std::string& kv_cache_dtype, const std::string& block_sparse,
                       const std::vector<std::vector<int32_t>>& prompts, int max_tokens,
                       const detail::TextChunks* text,
                       const std::optional<detail::EvalCalibration>& calibration = std::nullopt) {
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  int total = static_cast<int>(longest) + max_tokens;
  if (calibration) {  // each calibration prompt generates one token
    for (const auto& p : calibration->prompts)
      total = std::max(total, static_cast<int>(p.size()) + 1);
  }
  size_t requests = prompts.size();
  if (text != nullptr) {
    total = std::max(total, text->ctx_size + 1);
    requests = std::max(requests, text->chunks.size());
  }
  EngineConfig ec;
  ec.max_num_seqs = std::min<int>(64, static_cast<int>(requests));
  ec.max_num_batched_tokens = std::max(total * 4, 256);
  ec.num_kv_blocks = ec.max_num_seqs * ((total + ec.block_size - 1) / ec.block_size + 1);
  ec.capture_logits = true;
  ec.use_graphs = !f.no_cuda_graphs;
  ec.quantization = quantization;
  ec.kv_cache_dtype = kv_cache_dtype;
  ec.block_sparse_attention = block_sparse;
  IB_TRY(ec.validate());
  IB_ASSIGN_OR_RETURN(LocalEngine local, open_local_engine(model, f.model, f.device, dtype,
                                                           f.load_format, f.seed, ec));
  if (calibration) {
    IB_TRY(calibrate(*local.engine, calibration->prompts, calibration->options));
  }
  Run run;
  run.tokens.resize(prompts.size());
  run.logits.resize(prompts.size());
  std::vector<GenerationRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest req;
    req.id = i;
    req.prompt_tokens = prompts[i];
    req.max_tokens = max_tokens;
    reqs.push_back(std::move(req));
  }
  IB_TRY(detail::drive_requests(
      *local.engine, reqs, ec.max_num_seqs,
      [&](TokenEvent& e) {
        run.tokens[e.request_id].push_back(e.token);
        run.logits[e.request_id].push_back(std::move(e.logits));
      },
      [](PromptLogits&) {}));
  if (text != nullptr) {
    IB_ASSIGN_OR_RETURN(run.perplexity, detail::score_text(*local.engine, *text, ec.max_num_seqs));
  }
  return run;
}

// "fp8", or "none, kv fp8" when the KV cache is not the model dtype, and ", block-sparse
// local_blocks=16,vert_stride=8" with a block-sparse pattern.
std::string variant_name(const std::string& quantization, const std::string& kv_cache_dtype,
                         const std::string& block_sparse = "") {
  std::string name =
      kv_cache_dtype == "auto" ? quantization : quantization + ", kv " + kv_cache_dtype;
  return block_sparse.empty() ? name : name + ", block-sparse " + block_sparse;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto at = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(at, v.size() - 1)];
}

// The perplexity part of the JSON: the text, how it was cut and scored, both models' values.
nlohmann::json perplexity_json(const detail::TextChunks& text, const detail::Perplexity& ref,
                               const detail::Perplexity& cand) {
  return {{"text", text.path},
          {"tokenizer", text.tokenizer},
          {"text_tokens", text.text_tokens},
          {"ctx_size", text.ctx_size},
          {"chunks", text.chunks.size()},
          {"scored_tokens", ref.tokens},
          {"scored", fmt::format("tokens {}..{} of each chunk (its second half), each from the "
                                 "logits at the position before it",
                                 text.first_scored() + 1, text.ctx_size - 1)},
          {"reference_nll_mean", ref.mean_nll()},
          {"candidate_nll_mean", cand.mean_nll()},
          {"reference", ref.value()},
          {"candidate", cand.value()},
          {"ratio", cand.value() / ref.value()},
          {"delta", cand.value() - ref.value()}};
}

// Written whole, then renamed: never half a file.
Status write_json(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) return user_error(fmt::format("--output-json {}: cannot create it", path));
    out << j.dump(2) << "\n";
    if (!out) return runtime_error(fmt::format("--output-json {}: write failed", path));
  }
  std::filesystem::rename(tmp, path);
  return Ok{};
}

}  // namespace

void add_eval_flags(CLI::App& app, EvalFlags& f) {
  app.add_option("--model", f.model,
                 "preset name, a directory with config.json (+ safetensors) or a .gguf file")
      ->required();
  app.add_option("--quantization", f.quantization,
                 "the candidate: none, fp8, int8, int8-w8a8, awq, gptq or nf4")
      ->capture_default_str();
  app.add_option("--reference-quantization", f.reference,
                 "the reference: none, fp8, int8, int8-w8a8, awq, gptq or nf4")
      ->capture_default_str();
  app.add_option("--reference-dtype", f.reference_dtype,
                 "the reference's dtype (default: --dtype), e.g. bf16 against an fp16 candidate");
  app.add_option("--kv-cache-dtype", f.kv_cache_dtype, "the candidate's KV cache: auto, fp8")
      ->capture_default_str();
  app.add_option(
      "--block-sparse-attention", f.block_sparse_attention,
      std::string("the candidate's attention (the reference's stays dense): ") + kBlockSparseHelp);
  app.add_option("--reference-kv-cache-dtype", f.reference_kv_cache_dtype,
                 "the reference's KV cache: auto, fp8")
      ->capture_default_str();
  add_calibration_flags(app, f);
  app.add_option("--dataset-path", f.dataset_path,
                 "--calibration: the JSONL dataset (as run's) whose first prompts calibrate the "
                 "candidate");
  app.add_option("--num-prompts", f.num_prompts, "prompts (random token ids from --seed)")
      ->capture_default_str();
  app.add_option("--input-len", f.input_len, "tokens per prompt")->capture_default_str();
  app.add_option("--output-len", f.output_len, "steps compared per prompt")->capture_default_str();
  app.add_option("--text", f.text,
                 "also the perplexity of both models on this text file, in the model's "
                 "tokenizer.json (llama.cpp's -f)");
  app.add_option("--ctx-size", f.ctx_size,
                 "--text: tokens per chunk; the second half of each is scored")
      ->capture_default_str();
  app.add_option("--chunks", f.chunks, "--text: at most this many chunks (-1: all)")
      ->capture_default_str();
  app.add_option("--device", f.device, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--dtype", f.dtype, "auto (fp32 on cpu, bf16 on cuda), fp32, bf16, fp16")
      ->capture_default_str();
  app.add_option("--load-format", f.load_format, kLoadFormatHelp)->capture_default_str();
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
  for (const std::string& q : {f.quantization, f.reference}) {  // before either engine loads
    if (auto format = quantization_weight_format(q); !format.ok()) return format.error();
  }
  if (auto b = parse_block_sparse(f.block_sparse_attention); !b.ok()) return b.error();
  const std::string ref_dtype = f.reference_dtype.empty() ? f.dtype : f.reference_dtype;
  if (ref_dtype != "auto" && !parse_float_dtype(ref_dtype)) {
    return user_error(
        fmt::format("--reference-dtype {}: use auto, fp32, bf16 or fp16", f.reference_dtype));
  }
  if (!f.output_json.empty()) {  // before anything runs
    const auto parent = std::filesystem::absolute(f.output_json).parent_path();
    std::error_code ec;
    if (!std::filesystem::is_directory(parent, ec)) {
      return user_error(fmt::format("--output-json {}: {} is not a directory; create it first",
                                    f.output_json, parent.string()));
    }
  }
  IB_ASSIGN_OR_RETURN(const std::optional<detail::EvalCalibration> calibration,
                      detail::eval_calibration(f, model));
  std::optional<detail::TextChunks> text;
  if (!f.text.empty()) {
    IB_ASSIGN_OR_RETURN(text, detail::load_text_chunks(f, model));
  }
  const detail::TextChunks* chunks = text ? &*text : nullptr;
  // The prompts: random ids below the vocabulary (the reference's own text comes after).
  Rng rng(f.seed);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(f.num_prompts));
  for (auto& p : prompts) {
    for (int i = 0; i < f.input_len; ++i)
      p.push_back(static_cast<int32_t>(rng.uniform_int(1, model.vocab_size - 1)));
  }
  const std::string reference = variant_name(f.reference, f.reference_kv_cache_dtype);
  std::string candidate = variant_name(f.quantization, f.kv_cache_dtype, f.block_sparse_attention);
  if (calibration) {  // "int8-w8a8, static minmax asymmetric", as the leaderboard writes it
    candidate += fmt::format(", static {} {}", calibration_method_name(calibration->options.method),
                             activation_scheme_name(calibration->options.scheme));
  }
  std::cerr << fmt::format("eval: reference ({}, {}) generating {} x {} tokens{}\n", reference,
                           ref_dtype, f.num_prompts, f.output_len,
                           text ? fmt::format(", scoring {} chunks", text->chunks.size()) : "");
  IB_ASSIGN_OR_RETURN(const Run ref,
                      run_engine(f, model, f.reference, ref_dtype, f.reference_kv_cache_dtype, "",
                                 prompts, f.output_len, chunks));
  // The candidate sees the reference's context at every step.
  std::vector<std::vector<int32_t>> contexts;
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (int s = 0; s < f.output_len; ++s) {
      std::vector<int32_t> c = prompts[p];
      c.insert(c.end(), ref.tokens[p].begin(), ref.tokens[p].begin() + s);
      contexts.push_back(std::move(c));
    }
  }
  std::cerr << fmt::format("eval: candidate ({}, {}) on {} teacher-forced contexts{}\n", candidate,
                           f.dtype, contexts.size(),
                           calibration ? fmt::format(", calibrated first on {} prompts of {}",
                                                     calibration->prompts.size(), f.dataset_path)
                                       : "");
  IB_ASSIGN_OR_RETURN(const Run cand,
                      run_engine(f, model, f.quantization, f.dtype, f.kv_cache_dtype,
                                 f.block_sparse_attention, contexts, 1, chunks, calibration));
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
  nlohmann::json j{{"model", model.name},
                   {"reference", f.reference},
                   {"candidate", f.quantization},
                   {"reference_dtype", ref_dtype},
                   {"dtype", f.dtype},
                   {"reference_kv_cache_dtype", f.reference_kv_cache_dtype},
                   {"candidate_kv_cache_dtype", f.kv_cache_dtype},
                   {"candidate_block_sparse_attention",
                    f.block_sparse_attention.empty() ? nlohmann::json(nullptr)
                                                     : nlohmann::json(f.block_sparse_attention)},
                   {"input_len", f.input_len},
                   {"candidate_calibration", detail::calibration_json(calibration, f)},
                   {"device", f.device},
                   {"tokens", kl.size()},
                   {"kl_mean", mean},
                   {"kl_p99", percentile(kl, 0.99)},
                   {"kl_max", *std::max_element(kl.begin(), kl.end())},
                   {"top1_agreement", static_cast<double>(agree) / static_cast<double>(kl.size())}};
  std::cout << fmt::format(
      "| model | reference | candidate | context | tokens | KL mean | KL p99 | KL max | top-1 |\n"
      "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n"
      "| {} | {} | {} | {}..{} | {} | {:.6f} | {:.6f} | {:.6f} | {:.4f} |\n",
      model.name, reference, candidate, f.input_len, f.input_len + f.output_len - 1, kl.size(),
      j["kl_mean"].get<double>(), j["kl_p99"].get<double>(), j["kl_max"].get<double>(),
      j["top1_agreement"].get<double>());
  if (text) {
    j["perplexity"] = perplexity_json(*text, *ref.perplexity, *cand.perplexity);
    const nlohmann::json& p = j["perplexity"];
    std::cout << fmt::format(
        "\n| text | tokens | chunks x ctx | scored | PPL reference | PPL candidate | ratio |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        "| {} | {} | {} x {} | {} | {:.4f} | {:.4f} | {:.6f} |\n",
        std::filesystem::path(text->path).filename().string(), text->text_tokens,
        text->chunks.size(), text->ctx_size, ref.perplexity->tokens, p["reference"].get<double>(),
        p["candidate"].get<double>(), p["ratio"].get<double>());
  }
  if (!f.output_json.empty()) IB_TRY(write_json(f.output_json, j));
  return kExitOk;
}

}  // namespace ib
