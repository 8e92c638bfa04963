// The subcommands of the inferbench executable, as functions returning an exit code or an error
// for main() to print.
#pragma once

#include <string>
#include <vector>

#include "cli/calibration_flags.h"
#include "cli/run_options.h"
#include "core/plugin_registry.h"
#include "model/config.h"

namespace ib {

// Exit codes.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;
inline constexpr int kExitUser = 2;
inline constexpr int kExitInterrupted = 130;

// An execution's outcome as the exit code: nothing measured or an entry failed is a runtime
// failure.
inline int exit_code(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk:
      return kExitOk;
    case Outcome::kFailed:
      return kExitRuntime;
    case Outcome::kInterrupted:
      return kExitInterrupted;
  }
  return kExitRuntime;
}

// `inferbench generate`: greedy generation for one prompt of token ids (see generate_command.cpp).
struct GenerateFlags {
  std::string model;
  std::string prompt_token_ids;  // "1,15,300"
  int max_tokens = 16;
  std::string dump_logits;   // .npy path; empty: none
  std::string dump_routing;  // .json path (mixture-of-experts models); empty: none
  std::string device = "cpu";
  std::string dtype = "auto";
  std::string load_format = "auto";
  std::string quantization = "none";
  std::string kv_cache_dtype = "auto";
  std::string block_sparse_attention;  // local_blocks=L,vert_stride=S[,block_size=B]; "": dense
  uint64_t seed = 0;
  bool no_cuda_graphs = false;
  // LoRA: adapters to load (name=path), the one the request uses (default: the first), the
  // slots' rank, or the one adapter folded into the weights instead.
  std::vector<std::string> lora_modules;
  std::string lora_name;
  int max_lora_rank = 64;
  bool merge_lora = false;
  int tensor_parallel_size = 1;  // ranks (CPU threads, or GPUs over NCCL)
};
void add_generate_flags(CLI::App& app, GenerateFlags& flags);
Result<int> execute_generate(const GenerateFlags& flags);

// `inferbench tokenize`: the ids (and count) of a text in a model's own tokenizer
// (tokenize_command.cpp). User errors: no tokenizer at --model, an unreadable --file.
struct TokenizeFlags {
  std::string model;  // a model directory, a tokenizer.json file or a .gguf file
  std::string text;
  std::string file;    // read instead of text
  bool lines = false;  // each line on its own, one JSON object per line
  bool json = false;
};
void add_tokenize_flags(CLI::App& app, TokenizeFlags& flags);
Result<int> execute_tokenize(const TokenizeFlags& flags);

// `inferbench eval`: a quantization's accuracy loss against the unquantized model, per token
// (KL divergence, top-1 agreement), teacher-forced on the reference's tokens, and with --text the
// perplexity of both on a text file in the model's own tokenizer (eval_command.cpp).
// --calibration and its settings apply to the candidate, calibrated on --dataset-path's first
// prompts (as `run` calibrates on its dataset's) before it sees any context.
struct EvalFlags : CalibrationFlags {
  std::string model;
  std::string quantization = "fp8";  // the candidate
  std::string reference = "none";
  std::string reference_dtype;                    // "": --dtype
  std::string text;                               // perplexity on this file; "": none
  int ctx_size = 512;                             // tokens per chunk (llama.cpp's --ctx-size)
  int chunks = -1;                                // at most this many chunks; -1: all
  std::string kv_cache_dtype = "auto";            // the candidate's KV cache
  std::string block_sparse_attention;             // the candidate's pattern; "": dense
  std::string dataset_path;                       // JSONL prompts --calibration draws from
  std::string reference_kv_cache_dtype = "auto";  // the reference's
  int num_prompts = 8;
  int input_len = 32;
  int output_len = 32;
  std::string device = "cpu";
  std::string dtype = "auto";
  std::string load_format = "auto";
  uint64_t seed = 0;
  std::string output_json;
  bool no_cuda_graphs = false;
};
void add_eval_flags(CLI::App& app, EvalFlags& flags);
Result<int> execute_eval(const EvalFlags& flags);
// KL(p || q) in nats between the softmax distributions of two logit vectors (double precision).
double kl_divergence(const std::vector<float>& reference, const std::vector<float>& candidate);

// `inferbench plot DIR... --out FILE`: the cross-run memory heatmap (FILE.svg or FILE.html).
// Directories without memory samples are named on stderr and the rest drawn; an unwritable
// --out is reported before anything is read.
struct PlotFlags {
  std::vector<std::string> dirs;
  std::string out;
  int frames = 120;
  bool expert_load = false;  // one MoE run's layer x expert heatmap instead (.svg)
};
Result<int> execute_plot(const PlotFlags& flags);

// `inferbench models`: name, family, parameters, GiB in fp32, bf16, and as --quantization fp8,
// awq / gptq and nf4 allocate them, KV KiB/token, max context, and "yes" or the features the
// engine cannot run yet.
std::string models_table(const std::vector<ModelConfig>& models);

}  // namespace ib
