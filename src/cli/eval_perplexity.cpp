// `inferbench eval --text`: perplexity on a text file in the model's own tokenizer, with
// llama.cpp's chunking and scoring (the second half of every chunk), from the engine's prompt
// logits (one forward pass per chunk); and the request driver eval's two measurements share.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "cli/detail/eval.h"
#include "core/fs.h"
#include "model/tokenizer.h"

namespace ib::detail {

namespace fs = std::filesystem;

double log_sum_exp(std::span<const float> logits) {
  double max = -INFINITY;
  for (float v : logits) max = std::max(max, double{v});
  double sum = 0;
  for (float v : logits) sum += std::exp(double{v} - max);
  return max + std::log(sum);
}

Status drive_requests(Engine& engine, const std::vector<GenerationRequest>& requests, int max_live,
                      const std::function<void(TokenEvent&)>& on_token,
                      const std::function<void(PromptLogits&)>& on_prompt_logits) {
  size_t next = 0;
  int live = 0;
  const auto submit = [&]() -> Status {
    for (; next < requests.size() && live < max_live; ++next, ++live) {
      IB_TRY(engine.add_request(requests[next]));
    }
    return Ok{};
  };
  IB_TRY(submit());
  while (engine.has_unfinished()) {
    IB_ASSIGN_OR_RETURN(StepOutput out, engine.step());
    for (PromptLogits& p : out.prompt_logits) on_prompt_logits(p);
    for (TokenEvent& e : out.events) {
      on_token(e);
      if (e.finish != FinishReason::kNone) --live;
    }
    IB_TRY(submit());
  }
  return Ok{};
}

Result<TextChunks> load_text_chunks(const EvalFlags& f, const ModelConfig& model) {
  const std::string flag = "--text " + f.text;
  std::error_code ec;
  if (!fs::is_regular_file(f.text, ec)) {
    return user_error(flag + ": no such file; give the path of a text file to score");
  }
  if (!has_own_tokenizer(f.model)) {
    return user_error(fmt::format(
        "{}: perplexity needs the model's own tokenizer, and {} has no tokenizer.json (nor "
        "is it a GGUF file with tokenizer.ggml.* keys); give --model a checkpoint directory "
        "that holds its tokenizer.json, or a GGUF file with its tokenizer",
        flag, f.model));
  }
  const int context = model.max_position_embeddings;
  if (f.ctx_size < 3 || f.ctx_size + 1 > context) {
    return user_error(fmt::format(
        "--ctx-size {}: use 3 to {} (half of each chunk is context, the rest is scored; {} "
        "holds {} positions, one of them for the sampled token)",
        f.ctx_size, context - 1, model.name, context));
  }
  if (f.chunks == 0 || f.chunks < -1) {
    return user_error(fmt::format("--chunks {}: use a positive count, or -1 for all", f.chunks));
  }
  IB_ASSIGN_OR_RETURN(const std::string text, read_file(f.text));
  if (text.empty()) return user_error(flag + ": the file is empty; give a text to score");
  IB_ASSIGN_OR_RETURN(const auto tokenizer, load_tokenizer(f.model));
  const std::vector<int32_t> ids = tokenizer->encode(text);
  TextChunks out;
  out.path = f.text;
  out.tokenizer = tokenizer->name();
  out.text_tokens = static_cast<int64_t>(ids.size());
  out.ctx_size = f.ctx_size;
  const auto ctx = static_cast<size_t>(f.ctx_size);
  size_t count = ids.size() / ctx;
  if (count == 0) {
    return user_error(fmt::format(
        "{}: {} tokens, fewer than one chunk of --ctx-size {}; give a longer text or a smaller "
        "--ctx-size",
        flag, ids.size(), f.ctx_size));
  }
  if (f.chunks > 0) count = std::min(count, static_cast<size_t>(f.chunks));
  for (size_t c = 0; c < count; ++c) {
    const auto begin = ids.begin() + static_cast<std::ptrdiff_t>(c * ctx);
    out.chunks.emplace_back(begin, begin + static_cast<std::ptrdiff_t>(ctx));
    if (model.bos_token_id >= 0) out.chunks.back()[0] = model.bos_token_id;
  }
  return out;
}

double Perplexity::value() const {
  return std::exp(mean_nll());
}

Result<Perplexity> score_text(Engine& engine, const TextChunks& text, int max_live) {
  std::vector<GenerationRequest> requests;
  for (size_t c = 0; c < text.chunks.size(); ++c) {
    GenerationRequest r;
    r.id = c;
    r.prompt_tokens = text.chunks[c];
    r.max_tokens = 1;
    r.prompt_logits_from = text.first_scored();
    requests.push_back(std::move(r));
  }
  const auto vocab = static_cast<size_t>(engine.model_config().vocab_size);
  Perplexity ppl;
  const auto on_rows = [&](PromptLogits& p) {
    const std::vector<int32_t>& chunk = text.chunks[p.request_id];
    for (int i = 0; i < p.num_positions; ++i) {
      const auto next = static_cast<size_t>(p.start_pos + i + 1);  // the token this row predicts
      if (next >= chunk.size()) continue;
      const std::span<const float> row(p.logits.data() + static_cast<size_t>(i) * vocab, vocab);
      ppl.nll_sum += log_sum_exp(row) - double{row[static_cast<size_t>(chunk[next])]};
      ++ppl.tokens;
    }
  };
  IB_TRY(drive_requests(
      engine, requests, max_live, [](TokenEvent&) {}, on_rows));
  IB_ASSERT(ppl.tokens == text.scored_tokens(), "score_text: a scored position was not delivered");
  return ppl;
}

}  // namespace ib::detail
