// Internal to cli/: the parts of `inferbench eval` — driving requests through an engine, and
// perplexity on a text file (eval_perplexity.cpp) — apart from its flags and report.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/calibration.h"
#include "engine/engine.h"

namespace ib::detail {

// log(sum(exp(logits))) in double, stable for any logit range.
double log_sum_exp(std::span<const float> logits);

// Runs the requests to completion, at most max_live at once, in order; each token event and each
// prompt-logits row block goes to its callback as the steps produce it.
Status drive_requests(Engine& engine, const std::vector<GenerationRequest>& requests, int max_live,
                      const std::function<void(TokenEvent&)>& on_token,
                      const std::function<void(PromptLogits&)>& on_prompt_logits);

// --text tokenized with the model's own tokenizer and cut into chunks of ctx_size tokens, as
// llama.cpp's perplexity tool does: consecutive, not overlapping, the remainder dropped, at most
// --chunks of them; where the model has a BOS token it replaces each chunk's first token.
struct TextChunks {
  std::string path;
  std::string tokenizer;    // the tokenizer's name ("bpe")
  int64_t text_tokens = 0;  // the whole text's
  int ctx_size = 0;
  std::vector<std::vector<int32_t>> chunks;  // (chunks, ctx_size)
  // The first half of a chunk is context only; the tokens after it are scored, each predicted
  // from the logits at the position before it: tokens first_scored + 1 .. ctx_size - 1.
  int first_scored() const { return ctx_size / 2; }
  int64_t scored_tokens() const {
    return static_cast<int64_t>(chunks.size()) * (ctx_size - 1 - first_scored());
  }
};

// User errors (exit 2, before any engine loads), each naming the fix: an unreadable or empty
// file, a model without its own tokenizer.json (presets have none), --ctx-size below 3 or beyond
// the model's context, a text shorter than one chunk, --chunks 0.
Result<TextChunks> load_text_chunks(const EvalFlags& flags, const ModelConfig& model);

struct Perplexity {
  double nll_sum = 0;  // nats, over the scored tokens
  int64_t tokens = 0;
  double mean_nll() const { return nll_sum / static_cast<double>(tokens); }
  double value() const;  // exp(mean NLL)
};

// Every chunk as one request (its prompt logits from first_scored on, one output token), at most
// max_live at once; the NLL of each scored token under the engine's model.
Result<Perplexity> score_text(Engine& engine, const TextChunks& text, int max_live);

// The candidate's static activation scales (--calibration) and the prompts they come from
// (eval_calibration.cpp).
struct EvalCalibration {
  CalibrationOptions options;
  std::vector<std::vector<int32_t>> prompts;  // --dataset-path's first, tokenized as `run` does
};

// --dataset-path's first --calibration-prompts prompts, each fitting the model's context with
// the token it generates; nullopt without --calibration. User errors (resolve_calibration's, no
// --dataset-path, a dataset too small) come before any engine loads.
Result<std::optional<EvalCalibration>> eval_calibration(const EvalFlags& flags,
                                                        const ModelConfig& model);

// The candidate's calibration in --output-json (method, scheme, percentile, prompts, dataset), or
// null.
nlohmann::json calibration_json(const std::optional<EvalCalibration>& calibration,
                                const EvalFlags& flags);

}  // namespace ib::detail
