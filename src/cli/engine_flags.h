// The engine flags `inferbench run` and `inferbench serve` share (named as `vllm serve` names
// them): declared once here, registered once by add_engine_flags, and inherited by RunFlags and
// ServeFlags so that every caller still reads them as flags.max_num_seqs etc.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/result.h"
#include "engine/engine_config.h"

namespace ib {

struct EngineFlags {
  std::string load_format = "auto";
  // Unset: vLLM's default for the device (vllm_batch_defaults).
  std::optional<int> max_num_seqs;
  int tensor_parallel_size = 1;
  std::optional<int> max_num_batched_tokens;
  int max_model_len = 0;
  int block_size = 16;
  double gpu_memory_utilization = 0.9;
  std::string kv_cache_memory;          // CPU KV budget, e.g. 2GiB; empty: the default
  int num_threads = 0;                  // CPU threads (0: all)
  std::string quantization = "none";    // none, fp8, int8, ..., gguf (vLLM's --quantization)
  std::string kv_cache_dtype = "auto";  // auto, fp8 or fp8_e4m3 (vLLM's --kv-cache-dtype)
  // LoRA (vLLM's names; EngineConfig says what each does).
  bool enable_lora = false;
  std::vector<std::string> lora_modules;  // name=path ...
  int max_loras = 1;
  int max_lora_rank = 16;
  int max_cpu_loras = 0;
  bool merge_lora = false;
  std::string block_sparse_attention;  // local_blocks=L,vert_stride=S[,block_size=B]; "": dense
};

// The adapter names of --lora-modules (name=path items), in order; empty when none are given or
// --merge-lora folds the one adapter into the weights.
std::vector<std::string> lora_module_names(const EngineFlags& flags);

// --kv-cache-dtype's help, shared by every command that takes the flag.
inline constexpr const char* kKvCacheDtypeHelp =
    "auto (the model dtype), or fp8 / fp8_e4m3: K and V stored in E4M3 with one scale per layer "
    "each (the checkpoint's k_scale / v_scale, else 1.0), about twice the tokens of bf16";

// --block-sparse-attention's help, shared by every command that takes the flag.
inline constexpr const char* kBlockSparseHelp =
    "local + strided block-sparse attention on every layer, as vLLM's blocksparse params and "
    "Phi-3-small name it: local_blocks=L,vert_stride=S[,block_size=B] (B 64 by default); a query "
    "sees the L blocks of B tokens ending at its own and every S-th block before them; default "
    "dense";

// --load-format's help, shared by every command that takes the flag.
inline constexpr const char* kLoadFormatHelp =
    "auto (gguf for a GGUF --model, safetensors when the model directory has them, else dummy), "
    "dummy, safetensors or gguf";
// What --quantization gguf means, in every command's --quantization help.
inline constexpr const char* kGgufQuantizationHelp =
    "gguf: a .gguf --model's matmul weights in their ggml blocks, activations quantized to int8 "
    "per 32 as llama.cpp's CUDA kernels do (with --load-format dummy: dummy weights in "
    "llama.cpp's Q4_K_M mix)";

void add_engine_flags(CLI::App& app, EngineFlags& flags);

// vLLM's --max-num-seqs / --max-num-batched-tokens defaults for the device `device` names
// (vllm_batch_defaults with the GPU's name and memory; the CPU's otherwise), as `vllm serve`
// (api_server) or the offline engine sets them.
BatchDefaults batch_defaults_for(const std::string& device, bool api_server);

// The engine settings these flags give (--kv-cache-memory parsed when set; the batch limits not
// given, from defaults), not yet validated: run and serve add their own settings, then call
// EngineConfig::validate() once, before any file is written or weight loaded.
Result<EngineConfig> engine_config_from(const EngineFlags& flags, const BatchDefaults& defaults);

}  // namespace ib
