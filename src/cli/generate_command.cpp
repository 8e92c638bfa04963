// `inferbench generate`: one prompt of token ids through the embedded engine, greedy, printing
// the generated ids as JSON and optionally writing every step's logits as a .npy file (float32,
// (max_tokens, vocab)). For checks against other implementations (tools/hf_compare.py).
#include <cstdio>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "backend/backend_factory.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/local_engine.h"
#include "core/fs.h"
#include "engine/engine.h"
#include "model/gguf.h"
#include "model/presets.h"
#include "model/tensor_parallel.h"

namespace ib {
namespace {

Result<std::vector<int32_t>> parse_token_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t at = 0;
  while (at < text.size()) {
    const size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? comma : comma - at);
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return user_error(fmt::format(
          "--prompt-token-ids: '{}' is not a token id; write comma-separated ids like 1,15,300",
          item));
    }
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (ids.empty()) return user_error("--prompt-token-ids: give at least one token id");
  return ids;
}

// A .npy (format 1.0) of float32 rows (rows, cols), C order.
Status write_npy(const std::string& path, const std::vector<std::vector<float>>& rows) {
  const size_t cols = rows.empty() ? 0 : rows[0].size();
  std::string header = fmt::format(
      "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}", rows.size(), cols);
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) return user_error(fmt::format("--dump-logits {}: cannot create the file", path));
  out.write("\x93NUMPY\x01\x00", 8);
  const auto len = static_cast<uint16_t>(header.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(len_bytes, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& r : rows) {
    out.write(reinterpret_cast<const char*>(r.data()),
              static_cast<std::streamsize>(r.size() * sizeof(float)));
  }
  if (!out) return runtime_error(fmt::format("--dump-logits {}: write failed", path));
  return Ok{};
}

}  // namespace

void add_generate_flags(CLI::App& app, GenerateFlags& f) {
  app.add_option("--model", f.model,
                 "preset name, a directory with config.json (+ safetensors) or a .gguf file")
      ->required();
  app.add_option("--prompt-token-ids", f.prompt_token_ids, "comma-separated token ids")->required();
  app.add_option("--max-tokens", f.max_tokens, "tokens to generate (greedy)")
      ->capture_default_str();
  app.add_option("--dump-logits", f.dump_logits, "write each step's logits here (.npy, float32)");
  app.add_option("--dump-routing", f.dump_routing,
                 "write each step's experts per layer here (.json; mixture-of-experts models)");
  app.add_option("--device", f.device, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--dtype", f.dtype, "auto (fp32 on cpu, bf16 on cuda), fp32, bf16, fp16")
      ->capture_default_str();
  app.add_option("--load-format", f.load_format, kLoadFormatHelp)->capture_default_str();
  app.add_option("--quantization", f.quantization,
                 "none, fp8 (W8A8 E4M3), int8 (W8A16), int8-w8a8, awq, gptq or nf4, quantized at "
                 "load; " +
                     std::string(kGgufQuantizationHelp))
      ->capture_default_str();
  app.add_option("--kv-cache-dtype", f.kv_cache_dtype, kKvCacheDtypeHelp)->capture_default_str();
  app.add_option("--block-sparse-attention", f.block_sparse_attention, kBlockSparseHelp);
  app.add_option("--seed", f.seed, "seed of dummy weights")->capture_default_str();
  app.add_flag("--no-cuda-graphs,--enforce-eager", f.no_cuda_graphs, "decode op by op");
  app.add_option("--lora-modules", f.lora_modules,
                 "PEFT LoRA adapters, name=path ...; served unmerged (LoRA on) unless --merge-lora")
      ->expected(1, -1);
  app.add_option("--lora-name", f.lora_name,
                 "the adapter the request uses (default: the first of --lora-modules)");
  app.add_option("--max-lora-rank", f.max_lora_rank, "largest adapter rank accepted")
      ->capture_default_str();
  app.add_flag("--merge-lora", f.merge_lora,
               "fold the one --lora-modules adapter into the weights at load");
  app.add_option("--tensor-parallel-size", f.tensor_parallel_size,
                 "ranks the model is split over (CPU threads, or one GPU a rank over NCCL)")
      ->capture_default_str();
}

Result<int> execute_generate(const GenerateFlags& f) {
  IB_ASSIGN_OR_RETURN(const ModelConfig model, resolve_model(f.model));
  IB_TRY(model.check_supported());
  IB_TRY(check_gguf_quantization(f.quantization, f.model, is_gguf_file(f.model),
                                 f.load_format == "dummy"));
  IB_ASSIGN_OR_RETURN(const std::vector<int32_t> prompt, parse_token_ids(f.prompt_token_ids));
  if (f.max_tokens <= 0) return user_error("--max-tokens must be positive");
  if (!f.dump_routing.empty() && model.moe.num_experts == 0) {
    return user_error(fmt::format(
        "--dump-routing: model '{}' has no mixture-of-experts layers to report; drop the flag",
        model.name));
  }
  const int total = static_cast<int>(prompt.size()) + f.max_tokens;
  EngineConfig ec;
  ec.max_num_seqs = 1;
  ec.max_num_batched_tokens = std::max(total, 16);
  ec.num_kv_blocks = (total + ec.block_size - 1) / ec.block_size + 1;
  ec.capture_logits = !f.dump_logits.empty();
  ec.capture_routing = !f.dump_routing.empty();
  ec.use_graphs = !f.no_cuda_graphs;
  ec.quantization = f.quantization;
  ec.kv_cache_dtype = f.kv_cache_dtype;
  ec.block_sparse_attention = f.block_sparse_attention;
  ec.lora_modules = f.lora_modules;
  ec.merge_lora = f.merge_lora;
  ec.enable_lora = !f.lora_modules.empty() && !f.merge_lora;
  ec.max_loras = std::max<int>(1, static_cast<int>(f.lora_modules.size()));
  ec.max_lora_rank = f.max_lora_rank;
  ec.tensor_parallel_size = f.tensor_parallel_size;
  IB_TRY(ec.validate());  // before the backend starts
  IB_TRY(check_tensor_parallel(model, f.tensor_parallel_size));
  IB_TRY(check_rank_devices(f.device, f.tensor_parallel_size));
  std::string lora_name = f.lora_name;
  if (lora_name.empty() && ec.enable_lora) {
    IB_ASSIGN_OR_RETURN(const LoraModuleSpec first, parse_lora_module(f.lora_modules.front()));
    lora_name = first.name;
  }
  IB_ASSIGN_OR_RETURN(LocalEngine local, open_local_engine(model, f.model, f.device, f.dtype,
                                                           f.load_format, f.seed, ec));
  Engine* engine = local.engine.get();
  const Backend* backend = local.backend.get();

  GenerationRequest req;
  req.prompt_tokens = prompt;
  req.max_tokens = f.max_tokens;
  req.lora_name = lora_name;
  IB_TRY(engine->add_request(req));
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<int32_t>> routing;
  while (engine->has_unfinished()) {
    IB_ASSIGN_OR_RETURN(StepOutput out, engine->step());
    for (TokenEvent& e : out.events) {
      tokens.push_back(e.token);
      if (ec.capture_logits) logits.push_back(std::move(e.logits));
      if (ec.capture_routing) routing.push_back(std::move(e.routing));
    }
  }
  if (!f.dump_logits.empty()) IB_TRY(write_npy(f.dump_logits, logits));
  if (!f.dump_routing.empty()) {
    // steps[i][l]: the k experts (descending score) that layer l routed the token producing
    // generated token i to; -1s on a dense layer.
    const int k = model.moe.experts_per_token;
    nlohmann::json steps = nlohmann::json::array();
    for (const std::vector<int32_t>& r : routing) {
      nlohmann::json layers = nlohmann::json::array();
      for (size_t l = 0; l + static_cast<size_t>(k) <= r.size(); l += static_cast<size_t>(k))
        layers.push_back(std::vector<int32_t>(r.begin() + static_cast<std::ptrdiff_t>(l),
                                              r.begin() + static_cast<std::ptrdiff_t>(l) + k));
      steps.push_back(std::move(layers));
    }
    nlohmann::json doc{{"model", model.name},
                       {"num_layers", model.num_layers},
                       {"num_experts", model.moe.num_experts},
                       {"experts_per_token", k},
                       {"steps", std::move(steps)}};
    if (Status s = write_file_atomic(f.dump_routing, doc.dump() + "\n"); !s.ok()) {
      return user_error(fmt::format("--dump-routing {}: {}", f.dump_routing, s.error().message));
    }
  }
  const EngineProfile p = engine->profile();
  nlohmann::json j{{"model", model.name},
                   {"device", backend->device_info().name},
                   {"dtype", dtype_name(backend->activation_dtype())},
                   {"weights", engine->weights_description()},
                   {"prompt_token_ids", prompt},
                   {"token_ids", tokens},
                   {"lora_name", lora_name},
                   {"graph_steps", p.decode.graph_steps}};
  std::cout << j.dump() << "\n";
  return kExitOk;
}

}  // namespace ib
