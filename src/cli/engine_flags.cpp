#include "cli/engine_flags.h"

#include <string>

#include "backend/backend_factory.h"
#include "cli/run_options.h"
#include "engine/lora.h"

namespace ib {

void add_engine_flags(CLI::App& app, EngineFlags& f) {
  app.add_option("--load-format", f.load_format, kLoadFormatHelp)->capture_default_str();
  app.add_option("--max-num-seqs", f.max_num_seqs,
                 "engine: sequences per step (default: vLLM's for the device, 1024 on a GPU of "
                 "70 GiB or more other than an A100, else 256)");
  app.add_option("--max-num-batched-tokens", f.max_num_batched_tokens,
                 "engine: tokens per step (default: vLLM's for the device, 16384 on a GPU of 70 "
                 "GiB or more other than an A100 (8192 for serve), else 8192)");
  app.add_option("--max-model-len", f.max_model_len, "context limit (default: the model's)");
  app.add_option("--block-size", f.block_size, "KV-cache tokens per block")->capture_default_str();
  app.add_option("--gpu-memory-utilization", f.gpu_memory_utilization,
                 "CUDA: fraction of device memory for the engine")
      ->capture_default_str();
  app.add_option("--kv-cache-memory", f.kv_cache_memory,
                 "CPU KV-cache budget: bytes or e.g. 2GiB (default 2GiB)");
  app.add_option("--num-threads", f.num_threads, "CPU threads (0: all)")->capture_default_str();
  app.add_option("--tensor-parallel-size", f.tensor_parallel_size,
                 "ranks the model is split over (attention by heads, the MLP by columns then "
                 "rows, the embedding and the LM head by vocabulary); above 1 the CPU only so far, "
                 "each rank a thread pool of --num-threads")
      ->capture_default_str();
  app.add_option("--quantization", f.quantization,
                 "none; fp8: W8A8 E4M3; int8: W8A16 int8 weights; int8-w8a8: int8 weights and "
                 "activations (per-channel scales, per-token dynamic activation scales); awq / "
                 "gptq: 4-bit weights in groups of 128, with zero points / symmetric; nf4 (or "
                 "bitsandbytes): 4-bit NormalFloat in blocks of 64. Matmul weights are quantized "
                 "at load (or read from a checkpoint so quantized); embeddings, lm_head and norms "
                 "stay dense; " +
                     std::string(kGgufQuantizationHelp))
      ->capture_default_str();
  app.add_option("--kv-cache-dtype", f.kv_cache_dtype, kKvCacheDtypeHelp)->capture_default_str();
  app.add_option("--block-sparse-attention", f.block_sparse_attention, kBlockSparseHelp);
  app.add_flag("--enable-lora", f.enable_lora,
               "serve LoRA adapters unmerged (CPU for now): requests pick one by name, any mix "
               "in one batch");
  app.add_option("--lora-modules", f.lora_modules,
                 "PEFT adapters to load at startup, name=path ... (the directory PEFT's "
                 "save_pretrained wrote; also comma-separated, as suite files give them)")
      ->expected(1, -1)
      ->delimiter(',');
  app.add_option("--max-loras", f.max_loras,
                 "adapters loaded at once (each holds a device slot); loading another is refused "
                 "until one is unloaded")
      ->capture_default_str();
  app.add_option("--max-lora-rank", f.max_lora_rank,
                 "largest adapter rank accepted (the slots' width)")
      ->capture_default_str();
  app.add_option("--max-cpu-loras", f.max_cpu_loras,
                 "vLLM's host cache of adapters; here every loaded adapter holds a device slot, "
                 "so it is only checked to be >= --max-loras (default: --max-loras)");
  app.add_flag("--merge-lora", f.merge_lora,
               "fold the one --lora-modules adapter into the dense weights at load (W += "
               "scale B A) instead of serving it unmerged");
}

std::vector<std::string> lora_module_names(const EngineFlags& f) {
  std::vector<std::string> names;
  if (f.merge_lora) return names;
  for (const std::string& item : f.lora_modules) {
    if (auto m = parse_lora_module(item); m.ok()) names.push_back(m->name);
  }
  return names;
}

BatchDefaults batch_defaults_for(const std::string& device, bool api_server) {
  const std::optional<DeviceInfo> gpu = gpu_device_info(device);
  return gpu ? vllm_batch_defaults(gpu->name, gpu->total_bytes, api_server)
             : vllm_batch_defaults("", 0, api_server);
}

Result<EngineConfig> engine_config_from(const EngineFlags& f, const BatchDefaults& defaults) {
  EngineConfig c;
  c.block_size = f.block_size;
  c.max_num_seqs = f.max_num_seqs.value_or(defaults.max_num_seqs);
  c.max_num_batched_tokens = f.max_num_batched_tokens.value_or(defaults.max_num_batched_tokens);
  c.max_model_len = f.max_model_len;
  c.gpu_memory_utilization = f.gpu_memory_utilization;
  c.quantization = f.quantization;
  c.kv_cache_dtype = f.kv_cache_dtype;
  c.enable_lora = f.enable_lora;
  c.lora_modules = f.lora_modules;
  c.max_loras = f.max_loras;
  c.max_lora_rank = f.max_lora_rank;
  c.max_cpu_loras = f.max_cpu_loras;
  c.merge_lora = f.merge_lora;
  c.block_sparse_attention = f.block_sparse_attention;
  c.tensor_parallel_size = f.tensor_parallel_size;
  if (!f.kv_cache_memory.empty()) {
    IB_ASSIGN_OR_RETURN(c.cpu_kv_cache_bytes, parse_bytes(f.kv_cache_memory, "--kv-cache-memory"));
  }
  return c;
}

}  // namespace ib
