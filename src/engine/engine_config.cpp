// EngineConfig::validate: the one check of the engine's settings, naming each one's flag.
#include "engine/engine_config.h"

#include "engine/lora.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <sstream>
#include <string>

#include <fmt/format.h>

namespace ib {

const char* kv_growth_name(KvGrowth g) {
  return g == KvGrowth::kOnDemand ? "on-demand" : "preallocated";
}

Result<WeightFormat> quantization_weight_format(std::string_view quantization) {
  for (const WeightFormat f :
       {WeightFormat::kFp8E4M3, WeightFormat::kInt8W8A16, WeightFormat::kInt8W8A8}) {
    if (quantization == weight_format_name(f)) return f;
  }
  if (quantization == "none" || quantization == "gguf") return WeightFormat::kDense;
  if (quantization == "awq" || quantization == "gptq") return WeightFormat::kInt4W4A16;
  if (quantization == "nf4" || quantization == "bitsandbytes") return WeightFormat::kNf4;
  return user_error("--quantization " + std::string(quantization) +
                    ": not a quantization the engine runs; use none, fp8 (W8A8 E4M3), int8 "
                    "(W8A16, per-channel int8 weights), int8-w8a8 (int8 weights and per-token "
                    "int8 activations), awq (4-bit weights with zero points, groups of 128), "
                    "gptq (symmetric 4-bit weights, groups of 128) or nf4 (bitsandbytes' 4-bit "
                    "NormalFloat, blocks of 64; also named bitsandbytes), all quantized at load "
                    "or read from a checkpoint quantized so, or gguf (a GGUF file's weights as "
                    "stored)");
}

Status check_gguf_quantization(std::string_view quantization, const std::string& model,
                               bool weights_from_gguf, bool dummy_weights) {
  if (quantization != "gguf" || weights_from_gguf || dummy_weights) return Ok{};
  return user_error("--quantization gguf runs the weights of a GGUF file as stored, and '" + model +
                    "' gives none (it is not a GGUF file, or --load-format is neither auto nor "
                    "gguf); give --model FILE.gguf, --load-format dummy for dummy weights in "
                    "llama.cpp's Q4_K_M mix, or another --quantization (none, fp8, int8, "
                    "int8-w8a8, awq, gptq or nf4) with this model");
}

bool quantization_is_asymmetric(std::string_view quantization) {
  return quantization == "awq";
}

std::string quantization_name(WeightFormat format, bool asymmetric) {
  if (format == WeightFormat::kInt4W4A16) return asymmetric ? "awq" : "gptq";
  return weight_format_name(format);
}

Result<BlockSparse> parse_block_sparse(std::string_view text) {
  BlockSparse b;
  if (text.empty()) return b;
  const std::string form =
      "give local_blocks=L,vert_stride=S[,block_size=B] with positive "
      "integers, e.g. local_blocks=16,vert_stride=8 (block_size 64 by default)";
  const auto fail = [&](const std::string& why) -> Result<BlockSparse> {
    return user_error(fmt::format("--block-sparse-attention {}: {}; {}", text, why, form));
  };
  b.block_size = 64;
  bool has_local = false, has_stride = false;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view item = text.substr(at, comma - at);
    at = comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return fail(fmt::format("'{}' is not key=value", item));
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    int v = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc{} || end != value.data() + value.size() || v <= 0) {
      return fail(fmt::format("{} '{}' is not a positive integer", key, value));
    }
    if (key == "local_blocks") {
      b.local_blocks = v;
      has_local = true;
    } else if (key == "vert_stride") {
      b.vert_stride = v;
      has_stride = true;
    } else if (key == "block_size") {
      b.block_size = v;
    } else {
      return fail(fmt::format("unknown key '{}'", key));
    }
  }
  if (!has_local || !has_stride) return fail("local_blocks and vert_stride are both needed");
  return b;
}

Result<DType> kv_cache_dtype_for(std::string_view kv_cache_dtype, DType act) {
  if (kv_cache_dtype == "auto") return act;
  if (kv_cache_dtype == "fp8" || kv_cache_dtype == "fp8_e4m3") return DType::kF8E4M3;
  return user_error("--kv-cache-dtype " + std::string(kv_cache_dtype) +
                    ": not a KV-cache dtype the engine runs; use auto (the model dtype), fp8 or "
                    "fp8_e4m3 (E4M3 with per-layer k/v scales)");
}

BatchDefaults vllm_batch_defaults(std::string_view gpu_name, int64_t gpu_total_bytes,
                                  bool api_server) {
  std::string name(gpu_name);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  constexpr int64_t kLargeGpuBytes = int64_t{70} << 30;
  if (gpu_total_bytes >= kLargeGpuBytes && name.find("a100") == std::string::npos) {
    return {1024, api_server ? 8192 : 16384};
  }
  return {256, 8192};
}

Status EngineConfig::validate() const {
  auto positive = [](int64_t v, const char* name) -> Status {
    if (v > 0) return Ok{};
    return user_error(std::string(name) + " must be positive (got " + std::to_string(v) + ")");
  };
  IB_TRY(positive(block_size, "--block-size"));
  IB_TRY(positive(max_num_seqs, "--max-num-seqs"));
  IB_TRY(positive(tensor_parallel_size, "--tensor-parallel-size"));
  IB_TRY(positive(max_num_batched_tokens, "--max-num-batched-tokens"));
  IB_TRY(positive(static_batch_size, "--batch-size"));
  IB_TRY(positive(cpu_kv_cache_bytes, "--kv-cache-memory"));
  IB_TRY(positive(max_graph_batch, "--max-graph-batch"));
  IB_TRY(positive(max_graph_context, "--max-graph-context"));
  if (max_model_len < 0) IB_TRY(positive(max_model_len, "--max-model-len"));
  // Set by `generate` and tests only: named as the setting, not as a flag.
  if (num_kv_blocks < 0) IB_TRY(positive(num_kv_blocks, "the engine setting num_kv_blocks"));
  if (kv_growth_min_blocks < 0) {
    IB_TRY(positive(kv_growth_min_blocks, "the engine setting kv_growth_min_blocks"));
  }
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0)) {
    std::ostringstream shown;
    shown << gpu_memory_utilization;
    return user_error("--gpu-memory-utilization " + shown.str() + " must be in (0, 1]");
  }
  if (auto format = quantization_weight_format(quantization); !format.ok()) return format.error();
  if (auto kv = kv_cache_dtype_for(kv_cache_dtype, DType::kF32); !kv.ok()) return kv.error();
  if (auto b = parse_block_sparse(block_sparse_attention); !b.ok()) return b.error();
  for (const std::string& item : lora_modules) {
    if (auto m = parse_lora_module(item); !m.ok()) return m.error();
  }
  if (merge_lora && lora_modules.size() != 1) {
    return user_error(
        "--merge-lora folds one adapter into the weights; give exactly one "
        "--lora-modules name=path (got " +
        std::to_string(lora_modules.size()) + ")");
  }
  if (merge_lora && enable_lora) {
    return user_error(
        "--merge-lora and --enable-lora exclude each other: the first folds the "
        "adapter into the weights, the second serves adapters unmerged; drop one");
  }
  if (!lora_modules.empty() && !merge_lora && !enable_lora) {
    return user_error(
        "--lora-modules needs --enable-lora (serve adapters unmerged) or "
        "--merge-lora (fold the one adapter into the weights)");
  }
  if (enable_lora && static_cast<int64_t>(lora_modules.size()) > max_loras) {
    return user_error("--lora-modules gives " + std::to_string(lora_modules.size()) +
                      " adapters but --max-loras is " + std::to_string(max_loras) +
                      "; raise --max-loras to at least " + std::to_string(lora_modules.size()));
  }
  if (enable_lora) {
    IB_TRY(positive(max_loras, "--max-loras"));
    IB_TRY(positive(max_lora_rank, "--max-lora-rank"));
    if (max_cpu_loras != 0 && max_cpu_loras < max_loras) {
      return user_error("--max-cpu-loras " + std::to_string(max_cpu_loras) +
                        " must be at least --max-loras " + std::to_string(max_loras) +
                        " (as vLLM requires); raise it or leave it out");
    }
  }
  return Ok{};
}

}  // namespace ib
