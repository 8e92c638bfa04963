// Front door of workload/: which requests a benchmark sends (random token prompts or a JSONL
// dataset, with fixed or distributed lengths) and when (arrival.h). Deterministic for a seed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "model/tokenizer.h"
#include "targets/target.h"
#include "workload/arrival.h"      // IWYU pragma: export
#include "workload/length_dist.h"  // IWYU pragma: export

namespace ib {

// Random prompts draw token ids uniformly from [kFirstRandomTokenId, vocab_size), which keeps
// clear of the ids tokenizers reserve (pad, bos, eos).
inline constexpr int32_t kFirstRandomTokenId = 3;

// One image size of --random-mm-bucket-config, drawn with its probability.
struct ImageBucket {
  int64_t height_px = 0;
  int64_t width_px = 0;
  double probability = 0;
};

// --dataset-name random-mm (vLLM's flags): random token prompts as "random" makes them, each
// with a number of random RGB images, uniform in base * (1 -+ range_ratio) and at most
// limit_images, their sizes drawn from buckets.
struct RandomMmOptions {
  int base_items_per_request = 1;       // --random-mm-base-items-per-request
  double num_mm_items_range_ratio = 0;  // --random-mm-num-mm-items-range-ratio, in [0, 1]
  int limit_images = 255;               // --random-mm-limit-mm-per-prompt '{"image": N}'
  std::vector<ImageBucket> buckets = {  // --random-mm-bucket-config
      {256, 256, 0.5},
      {720, 1280, 0.5}};
};

// vLLM's --limit-mm-per-prompt value (also --random-mm-limit-mm-per-prompt), as JSON
// ('{"image": 2}', other modalities only at 0) or key=value ('image=2'): the number of images a
// prompt may hold (0..1000). flag names the flag in errors.
Result<int> parse_limit_mm_per_prompt(std::string_view text, std::string_view flag);

// --random-mm-bucket-config as vLLM writes it: '{(256, 256, 1): 0.5, (720, 1280, 1): 0.5}',
// keys (height, width, frames) with frames 1 (images; video is refused), probabilities >= 0 that
// are normalised to sum 1 (zero ones dropped). JSON's '{"256,256,1": 0.5}' is not accepted.
Result<std::vector<ImageBucket>> parse_mm_bucket_config(std::string_view text);

struct WorkloadOptions {
  std::string dataset_name = "random";  // "random", "random-mm" or "jsonl" (a workload plugin)
  std::string dataset_path;             // jsonl: the file
  int num_prompts = 200;
  LengthDist input_len = LengthDist::fixed(32);    // random prompts only
  LengthDist output_len = LengthDist::fixed(128);  // jsonl lines without "output_len" use it too
  uint64_t seed = 0;
  int vocab_size = 0;         // the model's; token ids must stay below it
  RandomMmOptions random_mm;  // --dataset-name random-mm
};

// A workload plugin: builds the requests of one run (ids 0..n-1, in order).
using WorkloadFactory =
    std::function<Result<std::vector<RequestSpec>>(const WorkloadOptions&, const Tokenizer&)>;

// User errors for non-positive counts or lengths, a missing vocabulary size, or a jsonl dataset
// without a path.
Status validate_workload_options(const WorkloadOptions& options);

// num_prompts prompts of random token ids with lengths drawn from the options' distributions.
Result<std::vector<RequestSpec>> make_random_requests(const WorkloadOptions& options);

// random-mm: make_random_requests' prompts with RandomMmOptions' images (RequestSpec::images, each
// a random image of a drawn size and its own seed).
Result<std::vector<RequestSpec>> make_random_mm_requests(const WorkloadOptions& options);

// A JSONL dataset: each non-blank line is {"prompt": "text"} or {"prompt_token_ids": [..]},
// optionally with "output_len" and images: "image": "file" or "images": ["file", ...], PNG or
// JPEG paths (relative ones from the dataset's directory). Text is encoded with tokenizer. When the
// file holds fewer than num_prompts lines they are reused in order. Errors name file:line and what
// is wrong.
Result<std::vector<RequestSpec>> load_jsonl_requests(const WorkloadOptions& options,
                                                     const Tokenizer& tokenizer);

// The first `count` prompts of the options' dataset, tokenized as load_jsonl_requests tokenizes
// them: the prompts a run of at least `count` requests sends first (calibration's prompts,
// engine/calibration.h). User errors: a dataset without prompts of its own (random token ids),
// `count` outside 1 .. the prompts the file holds, and load_jsonl_requests' own.
Result<std::vector<std::vector<int32_t>>> dataset_prompts(const WorkloadOptions& options,
                                                          const Tokenizer& tokenizer, int count);

// The user error for the first calibration prompt (dataset_prompts) that with the token it
// generates exceeds max_model_len.
Status check_prompts_fit(const std::vector<std::vector<int32_t>>& prompts, int64_t max_model_len,
                         const std::string& model_name, const std::string& dataset_path);

// The user error for the first request whose input + output exceeds max_model_len (naming both
// numbers), checked before any work starts.
Status check_context_fits(const std::vector<RequestSpec>& requests, int max_model_len,
                          const std::string& model_name);

}  // namespace ib
