// load_weights: allocation with an up-front memory check, dummy initialisation, format dispatch.
#include "engine/model_weights.h"

#include <cmath>
#include <string>

#include "engine/arch/architecture.h"
#include "engine/detail/weight_storage.h"
#include "model/safetensors.h"

namespace ib {
namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
}

// Element counts of every tensor, for the memory check before allocation.
struct WeightPlan {
  int64_t bytes = 0;
  void add(int64_t numel, DType dtype) {
    bytes += (numel * static_cast<int64_t>(dtype_size(dtype)) + 255) / 256 * 256;
  }
};

float matrix_scale(int64_t fan_in) {
  return static_cast<float>(std::sqrt(3.0 / static_cast<double>(fan_in)));
}

void fill_dummy(const ModelConfig& c, uint64_t seed, Backend& backend, ModelWeights& w) {
  const int64_t d = c.hidden_size;
  const int64_t q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim;
  const int64_t f = c.intermediate_size;
  backend.fill_uniform(w.embed, seed, kDummyEmbedStream, 1.0f);
  if (!c.tie_word_embeddings)
    backend.fill_uniform(w.lm_head.data, seed, kDummyLmHeadStream, matrix_scale(d));
  backend.fill_constant(w.final_norm, 1.0f);
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    auto stream = [&](DummyTensor t) { return dummy_weight_stream(l, t); };
    backend.fill_constant(lw.attn_norm, 1.0f);
    backend.fill_constant(lw.ffn_norm, 1.0f);
    backend.fill_uniform(lw.wqkv.data.slice_rows(0, q), seed, stream(DummyTensor::kQ),
                         matrix_scale(d));
    backend.fill_uniform(lw.wqkv.data.slice_rows(q, kv), seed, stream(DummyTensor::kK),
                         matrix_scale(d));
    backend.fill_uniform(lw.wqkv.data.slice_rows(q + kv, kv), seed, stream(DummyTensor::kV),
                         matrix_scale(d));
    if (!lw.bqkv.empty()) {
      const Tensor b = lw.bqkv.reshaped({q + 2 * kv, 1});  // rows = elements, to slice
      backend.fill_uniform(b.slice_rows(0, q), seed, stream(DummyTensor::kQBias), 0.1f);
      backend.fill_uniform(b.slice_rows(q, kv), seed, stream(DummyTensor::kKBias), 0.1f);
      backend.fill_uniform(b.slice_rows(q + kv, kv), seed, stream(DummyTensor::kVBias), 0.1f);
    }
    backend.fill_uniform(lw.wo.data, seed, stream(DummyTensor::kO), matrix_scale(q));
    backend.fill_uniform(lw.w_gate_up.data.slice_rows(0, f), seed, stream(DummyTensor::kGate),
                         matrix_scale(d));
    backend.fill_uniform(lw.w_gate_up.data.slice_rows(f, f), seed, stream(DummyTensor::kUp),
                         matrix_scale(d));
    backend.fill_uniform(lw.w_down.data, seed, stream(DummyTensor::kDown), matrix_scale(f));
  }
}

}  // namespace

int64_t LayerWeights::bytes() const {
  return static_cast<int64_t>(attn_norm.bytes() + wqkv.bytes() + bqkv.bytes() + wo.bytes() +
                              ffn_norm.bytes() + w_gate_up.bytes() + w_down.bytes());
}

uint64_t dummy_weight_stream(int layer, DummyTensor tensor) {
  return 1000 + 16 * static_cast<uint64_t>(layer) + static_cast<uint64_t>(tensor);
}

namespace detail {

Result<ModelWeights> allocate_weights(const ModelConfig& c, Backend& backend) {
  const DType dt = backend.activation_dtype();
  const int64_t d = c.hidden_size;
  const int64_t q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim;
  const int64_t f = c.intermediate_size;
  const int64_t v = c.vocab_size;

  WeightPlan plan;
  plan.add(v * d, dt);
  plan.add(d, dt);
  if (!c.tie_word_embeddings) plan.add(v * d, dt);
  for (int l = 0; l < c.num_layers; ++l) {
    for (int64_t n : {d, (q + 2 * kv) * d, q * d, d, 2 * f * d, d * f}) plan.add(n, dt);
    if (c.attention_bias) plan.add(q + 2 * kv, dt);
  }
  const DeviceInfo dev = backend.device_info();
  const MemorySnapshot mem = backend.memory().snapshot();
  const auto limit = backend.memory().limit_bytes();
  const std::string what = "model '" + c.name + "' needs " + gib(plan.bytes) + " of weights in " +
                           std::string(dtype_name(dt));
  if (dev.free_bytes > 0 && plan.bytes > dev.free_bytes) {
    return user_error(what + " but " + dev.kind + " has only " + gib(dev.free_bytes) +
                      " free; use a smaller model" +
                      (dev.kind == "cpu" ? std::string(" or a GPU (--device cuda)")
                                         : std::string(" or a lower-precision dtype")));
  }
  if (limit && mem.allocated_bytes + plan.bytes > *limit) {
    return user_error(what + " but the memory limit allows " + gib(*limit - mem.allocated_bytes) +
                      " more; raise --memory-limit or use a smaller model");
  }

  ModelWeights w;
  auto alloc = [&](std::initializer_list<int64_t> shape) -> Result<Tensor> {
    int64_t numel = 1;
    for (int64_t s : shape) numel *= s;
    IB_ASSIGN_OR_RETURN(Buffer buf, backend.alloc(static_cast<size_t>(numel) * dtype_size(dt),
                                                  MemoryTag::kWeights));
    Tensor t = buf.view(dt, shape);
    w.bytes += static_cast<int64_t>(buf.bytes());
    w.storage.push_back(std::move(buf));
    return t;
  };
  IB_ASSIGN_OR_RETURN(w.embed, alloc({v, d}));
  IB_ASSIGN_OR_RETURN(w.final_norm, alloc({d}));
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    IB_ASSIGN_OR_RETURN(w.lm_head, alloc({v, d}));
  }
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights lw;
    IB_ASSIGN_OR_RETURN(lw.attn_norm, alloc({d}));
    IB_ASSIGN_OR_RETURN(lw.wqkv, alloc({q + 2 * kv, d}));
    if (c.attention_bias) {
      IB_ASSIGN_OR_RETURN(lw.bqkv, alloc({q + 2 * kv}));
    }
    IB_ASSIGN_OR_RETURN(lw.wo, alloc({d, q}));
    IB_ASSIGN_OR_RETURN(lw.ffn_norm, alloc({d}));
    IB_ASSIGN_OR_RETURN(lw.w_gate_up, alloc({2 * f, d}));
    IB_ASSIGN_OR_RETURN(lw.w_down, alloc({d, f}));
    w.layers.push_back(lw);
  }
  return w;
}

}  // namespace detail

Result<ModelWeights> load_weights(const ModelConfig& config, const WeightOptions& options,
                                  Backend& backend) {
  IB_TRY(config.validate());
  IB_TRY(config.check_supported());
  IB_TRY(find_architecture(config));
  LoadFormat format = options.format;
  if (format == LoadFormat::kAuto) {
    format = !options.path.empty() && has_safetensors(options.path) ? LoadFormat::kSafetensors
                                                                    : LoadFormat::kDummy;
  }
  if (format == LoadFormat::kSafetensors && !has_safetensors(options.path)) {
    return user_error("no safetensors weights at '" + options.path +
                      "'; pass a directory with model.safetensors (or an index) or use "
                      "--load-format dummy");
  }
  IB_ASSIGN_OR_RETURN(ModelWeights w, detail::allocate_weights(config, backend));
  if (format == LoadFormat::kDummy) {
    fill_dummy(config, options.seed, backend, w);
    w.description = "dummy (seed " + std::to_string(options.seed) + ")";
  } else {
    IB_TRY(detail::load_safetensors(config, options.path, backend, w));
  }
  backend.synchronize();
  return w;
}

}  // namespace ib
