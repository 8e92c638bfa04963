// EngineConfig: every engine setting and its one validation. The front door stays engine.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "backend/block_sparse.h"
#include "backend/weight.h"
#include "core/result.h"

namespace ib {

enum class BatchingMode { kContinuous, kStatic };

// How the KV pool gets its memory. kPreallocated: sized and allocated once at startup (a full
// pool preempts). kOnDemand: starts small and grows in chunks through the backend's tracked
// allocator when the scheduler needs blocks; a refused growth (the --memory-limit cap or a real
// device allocation failure) is an out-of-memory event (StepStats::oom, EngineStats::oom), after
// which the pool stops growing and the scheduler preempts as with a full preallocated pool.
// A growth that cannot fit under the cap even with the old pool freed is refused before any
// copy; one whose old and new pools fit together copies device to device; otherwise it stages
// the cache through reused host memory (no transient double allocation). Decode steps run
// eagerly (graphs would hold the old addresses).
enum class KvGrowth { kPreallocated, kOnDemand };
const char* kv_growth_name(KvGrowth g);

// --quantization, as vLLM names it: "none" (dense weights in the activation dtype), "fp8"
// (W8A8 E4M3: the four per-layer matmul weights quantized at load, per output channel, with
// per-token dynamic activation scales), "int8" (W8A16: int8 weights per output channel,
// activations unquantized) or "int8-w8a8" (int8 weights and per-token dynamic int8
// activations), "awq" / "gptq" (kInt4W4A16: 4-bit weights in groups of 128, quantized at load
// with zero points (awq) or symmetrically (gptq), or a checkpoint's) or "nf4" (kNf4, also
// "bitsandbytes" as vLLM names it), or "gguf" (a GGUF file's weights as stored: kDense for now,
// each tensor dequantized at load into the activation dtype, until the K-quant kernels land);
// backend/weight.h defines each. The format of the quantized weights, or a user error listing
// the supported values.
Result<WeightFormat> quantization_weight_format(std::string_view quantization);
// --quantization gguf needs weights from a GGUF file (weights_from_gguf) or dummy weights
// (--load-format dummy: llama.cpp's Q4_K_M mix): a user error naming model and the fix when
// neither; Ok for every other quantization.
Status check_gguf_quantization(std::string_view quantization, const std::string& model,
                               bool weights_from_gguf, bool dummy_weights = false);
// Whether --quantization quantizes 4-bit weights at load with zero points (awq), not
// symmetrically (WeightRef::asymmetric).
bool quantization_is_asymmetric(std::string_view quantization);
// The --quantization that names format (kInt4W4A16: awq when asymmetric, else gptq).
std::string quantization_name(WeightFormat format, bool asymmetric);

// --kv-cache-dtype, as vLLM names it: "auto" (the activation dtype act) or "fp8" / "fp8_e4m3"
// (E4M3 with one scale per layer for K and one for V, backend/ops.h KvCacheLayer; the scales are
// the checkpoint's k_scale / v_scale where it has them, else 1.0). The cache's dtype, or a user
// error listing the accepted values.
Result<DType> kv_cache_dtype_for(std::string_view kv_cache_dtype, DType act);

// --block-sparse-attention: "" (dense attention) or comma-separated key=value items naming the
// local + strided pattern as vLLM's blocksparse params and Phi-3-small's config name it:
// local_blocks=L and vert_stride=S (required), block_size=B (default 64), each a positive
// integer (backend/block_sparse.h defines the pattern). The pattern, or a user error naming the
// item and the form.
Result<BlockSparse> parse_block_sparse(std::string_view text);

// vLLM's defaults for --max-num-seqs and --max-num-batched-tokens, which depend on the device
// (EngineArgs' batch defaults): a GPU of at least 70 GiB that is not an A100 (H100, H200, ...)
// takes 1,024 sequences and 16,384 tokens a step, 8,192 as an API server; any other device 256
// and 8,192 (vLLM gives an API server on a smaller GPU 2,048 tokens; inferbench keeps 8,192
// there). gpu_name empty and gpu_total_bytes 0: no GPU (the CPU backend).
struct BatchDefaults {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
};
BatchDefaults vllm_batch_defaults(std::string_view gpu_name, int64_t gpu_total_bytes,
                                  bool api_server);

// Every engine setting, in one place. The CLI's run, serve, sweep and suite, and `generate`, fill
// it from their flags (the flag of each field is named beside it) and call validate() before
// any file is written or weight loaded; create_engine() checks it once more as its contract.
struct EngineConfig {
  int block_size = 16;    // --block-size: tokens per KV block
  int num_kv_blocks = 0;  // (no flag; `generate` and tests) 0: size the pool from memory (below)
  double gpu_memory_utilization = 0.9;  // --gpu-memory-utilization: CUDA, share for the engine
  // --kv-cache-memory: CPU KV pool budget (capped at what max_num_seqs x max_model_len needs)
  int64_t cpu_kv_cache_bytes = 2LL << 30;
  int max_num_seqs = 256;             // --max-num-seqs
  int max_num_batched_tokens = 8192;  // --max-num-batched-tokens
  int max_model_len = 0;  // --max-model-len; 0: the model's context, cut to what the pool holds
  BatchingMode batching = BatchingMode::kContinuous;  // --batching continuous|static
  int static_batch_size = 8;    // --batch-size: kStatic admits a batch when the last finished
  bool capture_logits = false;  // tests: keep each sampled row's logits in the TokenEvent
  // generate --dump-routing: each sampled row's expert ids per layer in the TokenEvent
  // (mixture-of-experts models; nothing otherwise).
  bool capture_routing = false;
  // Decode graphs (backends that support them): one per padded batch-size bucket up to
  // max_graph_batch (also capped by max_num_seqs); contexts beyond max_graph_context run eager.
  bool use_graphs = true;                        // --no-cuda-graphs / --enforce-eager turn them off
  int max_graph_batch = 256;                     // --max-graph-batch
  int max_graph_context = 8192;                  // --max-graph-context
  KvGrowth kv_growth = KvGrowth::kPreallocated;  // --kv-cache-growth preallocated|on-demand
  int kv_growth_min_blocks = 0;  // (no flag) kOnDemand: initial size and smallest chunk (0: auto)
  // --quantization none|fp8|int8|int8-w8a8|awq|gptq|nf4|gguf: the matmul weights' format
  // (quantization_weight_format); whether the backend runs it is checked when the weights load,
  // before any is allocated (load_weights).
  std::string quantization = "none";
  // --kv-cache-dtype auto|fp8|fp8_e4m3: the KV cache's element type (kv_cache_dtype_for).
  std::string kv_cache_dtype = "auto";
  // LoRA, with vLLM's flags: --enable-lora; --max-loras: adapters loaded at once (each holds a
  // device slot of max_lora_rank); --max-lora-rank: the largest rank accepted (the slots' width);
  // --max-cpu-loras: vLLM's host cache of adapters; every adapter loaded here holds a device
  // slot, so it only has to be >= max_loras, as vLLM requires (0: max_loras).
  bool enable_lora = false;
  int max_loras = 1;
  int max_lora_rank = 16;
  int max_cpu_loras = 0;
  // --lora-modules name=path ...: PEFT adapters loaded at startup (engine/lora.h), each served
  // under its name (GenerationRequest::lora_name); needs enable_lora, and at most max_loras.
  std::vector<std::string> lora_modules;
  // --merge-lora: fold the one --lora-modules adapter into the dense weights at load instead
  // (requests then need no adapter name; the base model is gone).
  bool merge_lora = false;
  // --block-sparse-attention local_blocks=L,vert_stride=S[,block_size=B]: every layer's
  // attention keeps the local band and the strided blocks only (parse_block_sparse); "" dense.
  std::string block_sparse_attention;
  // --tensor-parallel-size: ranks the model is split over (Megatron's splits,
  // model/tensor_parallel.h); above 1 the ranks are CPU threads (--device cpu) or one GPU a
  // rank over NCCL (--device cuda).
  int tensor_parallel_size = 1;

  // The one check of these settings: a user error naming the flag and the range, or Ok.
  Status validate() const;
};

}  // namespace ib
