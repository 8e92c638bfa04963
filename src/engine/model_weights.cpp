// load_weights: allocation with an up-front memory check, dummy initialisation, format dispatch.
#include "engine/model_weights.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "engine/arch/architecture.h"
#include "engine/detail/weight_storage.h"
#include "engine/engine_config.h"
#include "model/gguf.h"
#include "model/safetensors.h"

namespace ib {
namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
}

// The staging scratch of quantized matmul weights (detail::DenseStaging): the largest one (the
// experts' among them), dense in the activation dtype; none when the weights are dense.
int64_t staging_bytes(const ModelConfig& c, DType act, WeightFormat format) {
  if (format == WeightFormat::kDense) return 0;
  int64_t most = 0;
  for (const auto& [n, k] : detail::quantizable_shapes(c)) most = std::max(most, n * k);
  return most * static_cast<int64_t>(dtype_size(act));
}

float matrix_scale(int64_t fan_in) {
  return static_cast<float>(std::sqrt(3.0 / static_cast<double>(fan_in)));
}

// One matmul weight's dummy values: its parts (rows, tensor) stacked, uniform(-a, a) with
// a = matrix_scale(fan_in), written through staging (quantized after, when the weight is).
struct DummyPart {
  int64_t rows;
  DummyTensor tensor;
};
void fill_dummy_matmul(Backend& backend, detail::DenseStaging& staging, const WeightRef& w,
                       uint64_t seed, int layer, int64_t fan_in,
                       std::initializer_list<DummyPart> parts) {
  const Tensor dense = staging.dense_for(w);  // (N, K)
  int64_t row = 0;
  for (const DummyPart& p : parts) {
    backend.fill_uniform(dense.slice_rows(row, p.rows), seed, dummy_weight_stream(layer, p.tensor),
                         matrix_scale(fan_in));
    row += p.rows;
  }
  staging.finish(dense, w);
}

void fill_dummy(const ModelConfig& c, uint64_t seed, int first_layer, Backend& backend,
                detail::DenseStaging& staging, ModelWeights& w) {
  const int64_t d = c.hidden_size;
  const int64_t q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim;
  const int64_t f = c.intermediate_size;
  backend.fill_uniform(w.embed, seed, kDummyEmbedStream, 1.0f);
  if (!c.tie_word_embeddings)
    backend.fill_uniform(w.lm_head.data, seed, kDummyLmHeadStream, matrix_scale(d));
  backend.fill_constant(w.final_norm, 1.0f);
  for (int part_layer = 0; part_layer < c.num_layers; ++part_layer) {
    LayerWeights& lw = w.layers[static_cast<size_t>(part_layer)];
    const int l = first_layer + part_layer;  // the layer's index in the whole model
    backend.fill_constant(lw.attn_norm, 1.0f);
    backend.fill_constant(lw.ffn_norm, 1.0f);
    if (!lw.post_attn_norm.empty()) backend.fill_constant(lw.post_attn_norm, 1.0f);
    if (!lw.post_ffn_norm.empty()) backend.fill_constant(lw.post_ffn_norm, 1.0f);
    if (c.mla.kv_lora_rank > 0) {
      detail::fill_dummy_mla_layer(c, seed, l, backend, lw);
      continue;
    }
    fill_dummy_matmul(backend, staging, lw.wqkv, seed, l, d,
                      {{q, DummyTensor::kQ}, {kv, DummyTensor::kK}, {kv, DummyTensor::kV}});
    if (!lw.bqkv.empty()) {
      const Tensor b = lw.bqkv.reshaped({q + 2 * kv, 1});  // rows = elements, to slice
      auto stream = [&](DummyTensor t) { return dummy_weight_stream(l, t); };
      backend.fill_uniform(b.slice_rows(0, q), seed, stream(DummyTensor::kQBias), 0.1f);
      backend.fill_uniform(b.slice_rows(q, kv), seed, stream(DummyTensor::kKBias), 0.1f);
      backend.fill_uniform(b.slice_rows(q + kv, kv), seed, stream(DummyTensor::kVBias), 0.1f);
    }
    fill_dummy_matmul(backend, staging, lw.wo, seed, l, q, {{d, DummyTensor::kO}});
    if (c.moe.num_experts > 0) {
      detail::fill_dummy_moe_layer(c, seed, l, backend, &staging, lw);
      continue;
    }
    fill_dummy_matmul(backend, staging, lw.w_gate_up, seed, l, d,
                      {{f, DummyTensor::kGate}, {f, DummyTensor::kUp}});
    fill_dummy_matmul(backend, staging, lw.w_down, seed, l, f, {{d, DummyTensor::kDown}});
  }
}

// Why the backend cannot hold matmul weights in format, and the fix.
std::string unsupported_quantization(WeightFormat format, const std::string& name,
                                     const Backend& backend) {
  const DeviceInfo dev = backend.device_info();
  std::string msg = "--quantization " + name + ": the " + dev.kind + " backend (" + dev.name +
                    ", " + std::string(dtype_name(backend.activation_dtype())) + ") does not run " +
                    name + " weights";
  if (format == WeightFormat::kFp8E4M3) {
    msg +=
        "; the CUDA backend runs them with --dtype bf16 or fp16 on GPUs with FP8 tensor cores "
        "(compute capability 8.9+: Ada, Hopper or newer), the CPU backend always; use such a "
        "--dtype or device, or drop --quantization";
  } else if (is_quantized(format)) {
    msg +=
        "; the CUDA backend runs them with --dtype bf16 or fp16 (compute capability 8.0+), the "
        "CPU backend always; use such a --dtype or device, or drop --quantization";
  }
  return msg;
}

}  // namespace

int64_t LayerWeights::bytes() const {
  auto total = static_cast<int64_t>(
      attn_norm.bytes() + wqkv.bytes() + bqkv.bytes() + wo.bytes() + ffn_norm.bytes() +
      post_attn_norm.bytes() + post_ffn_norm.bytes() + w_gate_up.bytes() + w_down.bytes() +
      router.bytes() + q_a.bytes() + q_a_norm.bytes() + kv_a.bytes() + kv_a_norm.bytes() +
      kv_b.bytes() + shared_gate_up.bytes() + shared_down.bytes());
  for (const WeightRef& w : expert_gate_up) total += static_cast<int64_t>(w.bytes());
  for (const WeightRef& w : expert_down) total += static_cast<int64_t>(w.bytes());
  return total;
}

uint64_t dummy_weight_stream(int layer, DummyTensor tensor) {
  return 1000 + 16 * static_cast<uint64_t>(layer) + static_cast<uint64_t>(tensor);
}

namespace detail {

Result<ModelWeights> allocate_weights(const ModelConfig& c, const MatmulLayout& layout,
                                      Backend& backend) {
  const WeightFormat format = layout.format;
  const DType dt = backend.activation_dtype();
  const int64_t d = c.hidden_size;
  const int64_t v = c.vocab_size;
  IB_TRY(check_groups(c, layout));

  const int64_t plan_bytes = planned_weight_bytes(c, dt, layout);
  const int64_t scratch_bytes = staging_bytes(c, dt, format);
  const int64_t need = plan_bytes + scratch_bytes;
  const DeviceInfo dev = backend.device_info();
  const MemorySnapshot mem = backend.memory().snapshot();
  const auto limit = backend.memory().limit_bytes();
  std::string what = "model '" + c.name + "' needs " + gib(plan_bytes) + " of weights in " +
                     std::string(dtype_name(dt));
  if (format != WeightFormat::kDense) {
    what += " with " + layout.name + " matmul weights, and " + gib(scratch_bytes) +
            " of scratch while quantizing them,";
  }
  if (dev.free_bytes > 0 && need > dev.free_bytes) {
    return user_error(what + " but " + dev.kind + " has only " + gib(dev.free_bytes) +
                      " free; use a smaller model" +
                      (dev.kind == "cpu" ? std::string(" or a GPU (--device cuda)")
                                         : std::string(" or a lower-precision dtype")));
  }
  if (limit && mem.allocated_bytes + need > *limit) {
    return user_error(what + " but the memory limit allows " + gib(*limit - mem.allocated_bytes) +
                      " more; raise --memory-limit or use a smaller model");
  }

  ModelWeights w;
  auto alloc = [&](DType dtype, std::initializer_list<int64_t> shape) -> Result<Tensor> {
    int64_t numel = 1;
    for (int64_t s : shape) numel *= s;
    IB_ASSIGN_OR_RETURN(Buffer buf, backend.alloc(static_cast<size_t>(numel) * dtype_size(dtype),
                                                  MemoryTag::kWeights));
    Tensor t = buf.view(dtype, shape);
    w.bytes += static_cast<int64_t>(buf.bytes());
    w.storage.push_back(std::move(buf));
    return t;
  };
  auto alloc_matmul = [&](const std::array<int64_t, 2>& shape, int layer,
                          int which) -> Result<WeightRef> {
    const auto [n, k] = shape;
    WeightRef r;
    if (format == WeightFormat::kDense) {
      IB_ASSIGN_OR_RETURN(r.data, alloc(dt, {n, k}));
      return r;
    }
    if (format == WeightFormat::kGguf) {
      r.format = format;
      r.gguf = layout.gguf.at(static_cast<size_t>(layer))[static_cast<size_t>(which)];
      IB_ASSIGN_OR_RETURN(r.data, alloc(DType::kU8, {n, gguf_row_stride(r.gguf)}));
      return r;
    }
    r.format = format;
    if (!is_4bit(format)) {
      IB_ASSIGN_OR_RETURN(r.data, alloc(quantized_data_dtype(format), {n, k}));
      IB_ASSIGN_OR_RETURN(r.scales, alloc(DType::kF32, {n}));
      return r;
    }
    r.group_size = layout.group_size > 0 ? layout.group_size : static_cast<int>(k);
    r.asymmetric = layout.asymmetric;
    const int64_t groups = k / r.group_size;
    IB_ASSIGN_OR_RETURN(r.data, alloc(DType::kU8, {n, k / 2}));
    if (format == WeightFormat::kNf4) {
      IB_ASSIGN_OR_RETURN(r.scales, alloc(DType::kF32, {n, groups}));
      return r;
    }
    IB_ASSIGN_OR_RETURN(r.scales, alloc(DType::kF16, {n, groups}));
    IB_ASSIGN_OR_RETURN(r.zeros, alloc(DType::kU8, {n, groups}));
    if (layout.act_order) {
      IB_ASSIGN_OR_RETURN(r.input_perm, alloc(DType::kI32, {k}));
    }
    return r;
  };
  IB_ASSIGN_OR_RETURN(w.embed, alloc(dt, {v, d}));
  IB_ASSIGN_OR_RETURN(w.final_norm, alloc(dt, {d}));
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    IB_ASSIGN_OR_RETURN(w.lm_head, alloc(dt, {v, d}));
  }
  const auto shapes = matmul_shapes(c);
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights lw;
    IB_ASSIGN_OR_RETURN(lw.attn_norm, alloc(dt, {d}));
    if (c.mla.kv_lora_rank > 0) {  // DeepSeek-V2: dense weights (detail::check_moe_runs)
      IB_ASSIGN_OR_RETURN(lw.ffn_norm, alloc(dt, {d}));
      IB_TRY(allocate_mla_layer(
          c, l, [&](std::initializer_list<int64_t> shape) { return alloc(dt, shape); }, lw));
      w.layers.push_back(lw);
      continue;
    }
    IB_ASSIGN_OR_RETURN(lw.wqkv, alloc_matmul(shapes[0], l, 0));
    if (c.attention_bias) {
      IB_ASSIGN_OR_RETURN(lw.bqkv, alloc(dt, {shapes[0][0]}));
    }
    IB_ASSIGN_OR_RETURN(lw.wo, alloc_matmul(shapes[1], l, 1));
    IB_ASSIGN_OR_RETURN(lw.ffn_norm, alloc(dt, {d}));
    if (c.sandwich_norms) {
      IB_ASSIGN_OR_RETURN(lw.post_attn_norm, alloc(dt, {d}));
      IB_ASSIGN_OR_RETURN(lw.post_ffn_norm, alloc(dt, {d}));
    }
    if (c.moe.num_experts > 0) {  // the experts in layout too (detail::check_moe_runs)
      IB_TRY(allocate_moe_layer(
          c, [&](std::initializer_list<int64_t> shape) { return alloc(dt, shape); },
          [&](const std::array<int64_t, 2>& shape) { return alloc_matmul(shape, l, 2); }, lw));
      w.layers.push_back(lw);
      continue;
    }
    IB_ASSIGN_OR_RETURN(lw.w_gate_up, alloc_matmul(shapes[2], l, 2));
    IB_ASSIGN_OR_RETURN(lw.w_down, alloc_matmul(shapes[3], l, 3));
    w.layers.push_back(lw);
  }
  return w;
}

Result<DenseStaging> DenseStaging::create(const ModelConfig& c, WeightFormat format,
                                          Backend& backend) {
  DenseStaging staging(backend);
  const int64_t bytes = staging_bytes(c, backend.activation_dtype(), format);
  if (bytes > 0) {
    IB_ASSIGN_OR_RETURN(staging.scratch_,
                        backend.alloc(static_cast<size_t>(bytes), MemoryTag::kWorkspace));
  }
  return staging;
}

Tensor DenseStaging::dense_for(const WeightRef& weight) const {
  if (weight.format == WeightFormat::kDense) return weight.data;
  const int64_t n = weight.rows(), k = weight.cols();
  IB_ASSERT(
      static_cast<size_t>(n * k) * dtype_size(backend_->activation_dtype()) <= scratch_.bytes(),
      "DenseStaging: the scratch is smaller than a quantized weight");
  return scratch_.view(backend_->activation_dtype(), {n, k});
}

void DenseStaging::finish(const Tensor& dense, const WeightRef& weight) {
  if (weight.format == WeightFormat::kGguf) {
    if (!host_pool_) host_pool_ = std::make_unique<ThreadPool>(0);
    quantize_gguf_weight(*backend_, *host_pool_, dense, weight);
  } else if (weight.format != WeightFormat::kDense) {
    backend_->quantize_weight(dense, weight);
  }
}

}  // namespace detail

namespace {

// --quantization gguf's layout over these rows.
MatmulLayout gguf_layout(std::vector<std::array<GgufRows, 4>> rows) {
  MatmulLayout layout;
  layout.format = WeightFormat::kGguf;
  layout.name = "gguf";
  layout.gguf = std::move(rows);
  return layout;
}

}  // namespace

Result<MatmulLayout> gguf_q4_k_m_layout(const ModelConfig& config) {
  IB_ASSIGN_OR_RETURN(auto rows, detail::dummy_gguf_rows(config));
  return gguf_layout(std::move(rows));
}

LoadFormat resolved_load_format(const WeightOptions& options) {
  if (options.format != LoadFormat::kAuto) return options.format;
  return is_gguf_file(options.path)                               ? LoadFormat::kGguf
         : !options.path.empty() && has_safetensors(options.path) ? LoadFormat::kSafetensors
                                                                  : LoadFormat::kDummy;
}

Result<ModelWeights> load_weights(const ModelConfig& config, const WeightOptions& options,
                                  Backend& backend) {
  IB_TRY(config.validate());
  IB_TRY(config.check_supported());
  IB_TRY(find_architecture(config));
  IB_ASSERT(options.first_layer == 0 || ((options.format == LoadFormat::kDummy ||
                                          options.format == LoadFormat::kSafetensors) &&
                                         !options.gguf_as_stored),
            "load_weights: a part of a model from its first_layer: dummy weights or a "
            "safetensors checkpoint (dense, quantized at load, or quantized as published), not "
            "GGUF");
  const LoadFormat format = resolved_load_format(options);
  if (format == LoadFormat::kSafetensors && !has_safetensors(options.path)) {
    return user_error("no safetensors weights at '" + options.path +
                      "'; pass a directory with model.safetensors (or an index) or use "
                      "--load-format dummy");
  }
  if (format == LoadFormat::kGguf && !is_gguf_file(options.path)) {
    return user_error("--load-format gguf: '" + options.path +
                      "' is not a GGUF file; pass --model FILE.gguf or another --load-format");
  }
  IB_TRY(check_gguf_quantization(options.gguf_as_stored ? "gguf" : "", options.path,
                                 format == LoadFormat::kGguf, format == LoadFormat::kDummy));
  const CheckpointQuantization& cq = config.quantization;
  const std::string name = quantization_name(options.quantization, options.asymmetric);
  if (format == LoadFormat::kSafetensors && cq.quantized() && name != cq.format) {
    const std::string held = cq.format == "fp8"                ? "an FP8"
                             : detail::is_4bit_name(cq.format) ? "a 4-bit (" + cq.format + ")"
                                                               : "an INT8 (" + cq.format + ")";
    return user_error("'" + options.path + "' holds " + held +
                      " checkpoint (quantization_config quant_method \"" + cq.quant_method +
                      "\"); run it with --quantization " + cq.format);
  }
  IB_TRY(detail::check_moe_runs(config, options.quantization, backend));
  if (!backend.supports_weight_format(options.quantization)) {
    return user_error(unsupported_quantization(options.quantization, name, backend));
  }
  // A quantized checkpoint's matmul weights arrive quantized: no dense staging.
  const bool prequantized = format == LoadFormat::kSafetensors && cq.quantized();
  MatmulLayout layout = prequantized ? detail::checkpoint_layout(options.quantization, cq)
                                     : load_time_layout(options.quantization, options.asymmetric);
  // --quantization gguf: the matmul weights in their ggml blocks where the backend runs them.
  // A file with a matmul weight in a float type (an F16 file) loads dense throughout: the
  // engine runs one kind of matmul weight per model.
  bool gguf_blocks = format == LoadFormat::kGguf && options.gguf_as_stored &&
                     options.quantization == WeightFormat::kDense &&
                     backend.supports_weight_format(WeightFormat::kGguf) &&
                     config.moe.num_experts == 0 && config.mla.kv_lora_rank == 0;
  // --quantization gguf on dummy weights: llama.cpp's Q4_K_M mix, quantized at load.
  const bool gguf_dummy = format == LoadFormat::kDummy && options.gguf_as_stored;
  if (gguf_dummy) {
    IB_ASSIGN_OR_RETURN(layout, gguf_q4_k_m_layout(config));
    if (!backend.supports_weight_format(WeightFormat::kGguf)) {
      return user_error("--quantization gguf with --load-format dummy: the " +
                        backend.device_info().kind + " backend (" +
                        std::string(dtype_name(backend.activation_dtype())) +
                        ") does not run GGUF blocks; on CUDA use --dtype bf16 or fp16");
    }
  } else if (gguf_blocks) {
    IB_ASSIGN_OR_RETURN(auto rows, detail::gguf_matmul_rows(config, options.path));
    for (const auto& layer : rows) {
      for (const GgufRows& weight : layer) gguf_blocks = gguf_blocks && weight.count > 0;
    }
    if (gguf_blocks) layout = gguf_layout(std::move(rows));
  }
  IB_ASSIGN_OR_RETURN(ModelWeights w, detail::allocate_weights(config, layout, backend));
  IB_ASSIGN_OR_RETURN(detail::DenseStaging staging,
                      detail::DenseStaging::create(config,
                                                   prequantized ? WeightFormat::kDense
                                                   : gguf_dummy ? WeightFormat::kGguf
                                                                : options.quantization,
                                                   backend));
  if (format == LoadFormat::kDummy) {
    fill_dummy(config, options.seed, options.first_layer, backend, staging, w);
    w.description = "dummy (seed " + std::to_string(options.seed) + ")" +
                    (gguf_dummy ? ", quantized at load in llama.cpp's Q4_K_M mix" : "");
  } else if (format == LoadFormat::kGguf) {
    IB_TRY(detail::load_gguf(config, options.path, backend, staging, w));
  } else {
    const detail::LayerRange layers{options.first_layer, options.whole_num_layers};
    IB_TRY(detail::load_safetensors(config, options.path, backend, staging, w, layers));
  }
  if (layout.format != WeightFormat::kDense) {
    w.description +=
        ", " + detail::quantization_description(layout, prequantized && cq.static_activations);
  }
  // quantize_weight, which readies the backend, did not run
  if (prequantized || gguf_blocks || gguf_dummy) {
    for (const LayerWeights& l : w.layers) {
      for (const WeightRef* ref : {&l.wqkv, &l.wo, &l.w_gate_up, &l.w_down}) {
        if (is_quantized(ref->format)) IB_TRY(backend.prepare_weight(*ref));
      }
    }
  }
  backend.synchronize();  // before the staging's scratch is freed
  return w;
}

}  // namespace ib
