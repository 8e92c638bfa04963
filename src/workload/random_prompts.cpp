#include <fmt/format.h>

#include "workload/workload.h"

namespace ib {

Status validate_workload_options(const WorkloadOptions& options) {
  if (options.num_prompts <= 0) {
    return user_error(fmt::format("--num-prompts must be positive (got {})", options.num_prompts));
  }
  if (options.dataset_name == "random" || options.dataset_name == "random-mm") {
    IB_TRY(options.input_len.validate(
        options.input_len.kind == LengthDist::Kind::kFixed ? "--input-len" : "--input-len-dist"));
  }
  IB_TRY(options.output_len.validate(
      options.output_len.kind == LengthDist::Kind::kFixed ? "--output-len" : "--output-len-dist"));
  if (options.vocab_size <= kFirstRandomTokenId) {
    return user_error(fmt::format("the model's vocabulary ({} tokens) is too small for a workload",
                                  options.vocab_size));
  }
  if (options.dataset_name == "jsonl" && options.dataset_path.empty()) {
    return user_error("--dataset-name jsonl needs --dataset-path FILE");
  }
  return Ok{};
}

Result<std::vector<RequestSpec>> make_random_requests(const WorkloadOptions& options) {
  IB_TRY(validate_workload_options(options));
  // Separate streams for lengths and tokens: changing --input-len does not reshuffle the output
  // lengths of a seed, and vice versa.
  Rng input_len_rng(options.seed * 4 + 1);
  Rng output_len_rng(options.seed * 4 + 2);
  Rng token_rng(options.seed * 4 + 3);
  std::vector<RequestSpec> out(static_cast<size_t>(options.num_prompts));
  for (size_t i = 0; i < out.size(); ++i) {
    RequestSpec& r = out[i];
    r.id = i;
    r.input_len = sample_length(options.input_len, input_len_rng);
    r.output_len = sample_length(options.output_len, output_len_rng);
    r.prompt_tokens.resize(static_cast<size_t>(r.input_len));  // (input_len)
    for (auto& t : r.prompt_tokens) {
      t = static_cast<int32_t>(token_rng.uniform_int(kFirstRandomTokenId, options.vocab_size - 1));
    }
  }
  return out;
}

Status check_prompts_fit(const std::vector<std::vector<int32_t>>& prompts, int64_t max_model_len,
                         const std::string& model_name, const std::string& dataset_path) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (static_cast<int64_t>(prompts[i].size()) + 1 > max_model_len) {
      return user_error(fmt::format(
          "calibration prompt {} of {} has {} tokens, beyond {}'s context of {} with the token it "
          "generates; lower --calibration-prompts or shorten the prompt",
          i + 1, dataset_path, prompts[i].size(), model_name, max_model_len));
    }
  }
  return Ok{};
}

Status check_context_fits(const std::vector<RequestSpec>& requests, int max_model_len,
                          const std::string& model_name) {
  for (const auto& r : requests) {
    const int64_t context = static_cast<int64_t>(r.input_len) + r.output_len;
    if (context > max_model_len) {
      return user_error(fmt::format(
          "request {} needs a context of {} tokens (input {} + output {}) but {} allows {} "
          "(max_model_len); shorten the input/output lengths",
          r.id, context, r.input_len, r.output_len, model_name, max_model_len));
    }
  }
  return Ok{};
}

}  // namespace ib
