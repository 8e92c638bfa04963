// Mixture-of-experts layers' weights: allocation (experts dense or quantized), dummy values with a
// routing spread, their bytes, and the refusals of what the engine cannot run with them yet.
#include <algorithm>
#include <cmath>
#include <string>

#include "engine/detail/weight_storage.h"
#include "engine/moe_support.h"

namespace ib {

uint64_t dummy_expert_stream(int layer, int expert, DummyExpertPart part) {
  return 1'000'000 + 4 * (1024 * static_cast<uint64_t>(layer) + static_cast<uint64_t>(expert)) +
         static_cast<uint64_t>(part);
}

namespace {

std::string moe_model(const ModelConfig& c) {
  return "model '" + c.name + "' is a mixture-of-experts model (" +
         std::to_string(c.moe.num_experts) + " experts, top-" +
         std::to_string(c.moe.experts_per_token) + ")";
}

}  // namespace

Status check_moe_quantization(const ModelConfig& c, WeightFormat quantization) {
  if (c.moe.num_experts == 0) return Ok{};
  if (quantization == WeightFormat::kDense && !c.quantization.quantized()) return Ok{};
  if (c.mla.kv_lora_rank > 0 || quantization == WeightFormat::kGguf) {
    return user_error(moe_model(c) + ": its experts run with dense weights only for now" +
                      (c.mla.kv_lora_rank > 0 ? std::string(" (multi-head latent attention)")
                                              : std::string(" (not in GGUF blocks)")) +
                      "; drop --quantization or use a dense checkpoint");
  }
  return Ok{};
}

namespace detail {
namespace {

float matrix_scale(int64_t fan_in) {
  return static_cast<float>(std::sqrt(3.0 / static_cast<double>(fan_in)));
}

}  // namespace

Status allocate_moe_layer(const ModelConfig& c, const AllocTensor& alloc,
                          const AllocMatmul& alloc_expert, LayerWeights& layer) {
  const int64_t d = c.hidden_size, f = c.moe.expert_intermediate_size, e = c.moe.num_experts;
  IB_ASSIGN_OR_RETURN(layer.router.data, alloc({e, d}));
  for (int64_t i = 0; i < e; ++i) {
    IB_ASSIGN_OR_RETURN(WeightRef gate_up, alloc_expert({2 * f, d}));
    IB_ASSIGN_OR_RETURN(WeightRef down, alloc_expert({d, f}));
    layer.expert_gate_up.push_back(gate_up);
    layer.expert_down.push_back(down);
  }
  return Ok{};
}

void fill_dummy_moe_layer(const ModelConfig& c, uint64_t seed, int l, Backend& backend,
                          DenseStaging* staging, LayerWeights& layer) {
  const int64_t d = c.hidden_size, f = c.moe.expert_intermediate_size;
  // The expert's dense values: the weight itself, or the staging scratch quantized after.
  auto dense_for = [&](const WeightRef& w) {
    IB_ASSERT(staging != nullptr || w.format == WeightFormat::kDense,
              "fill_dummy_moe_layer: quantized experts need the staging");
    return staging ? staging->dense_for(w) : w.data;
  };
  auto finish = [&](const Tensor& dense, const WeightRef& w) {
    if (staging) staging->finish(dense, w);
  };
  for (int e = 0; e < c.moe.num_experts; ++e) {
    const float spread = kDummyRouterSpread[static_cast<size_t>(e) % std::size(kDummyRouterSpread)];
    backend.fill_uniform(layer.router.data.slice_rows(e, 1), seed,
                         dummy_expert_stream(l, e, DummyExpertPart::kRouter),
                         matrix_scale(d) * spread);
    const WeightRef& gu = layer.expert_gate_up[static_cast<size_t>(e)];
    const Tensor gate_up = dense_for(gu);
    backend.fill_uniform(gate_up.slice_rows(0, f), seed,
                         dummy_expert_stream(l, e, DummyExpertPart::kGate), matrix_scale(d));
    backend.fill_uniform(gate_up.slice_rows(f, f), seed,
                         dummy_expert_stream(l, e, DummyExpertPart::kUp), matrix_scale(d));
    finish(gate_up, gu);
    const WeightRef& dn = layer.expert_down[static_cast<size_t>(e)];
    const Tensor down = dense_for(dn);
    backend.fill_uniform(down, seed, dummy_expert_stream(l, e, DummyExpertPart::kDown),
                         matrix_scale(f));
    finish(down, dn);
  }
}

int64_t moe_layer_bytes(const ModelConfig& c, DType dtype, const MatmulLayout& layout) {
  const int64_t d = c.hidden_size, f = c.moe.expert_intermediate_size, e = c.moe.num_experts;
  const int64_t router = (e * d * static_cast<int64_t>(dtype_size(dtype)) + 255) / 256 * 256;
  return router + e * (matmul_weight_bytes(2 * f, d, dtype, layout) +
                       matmul_weight_bytes(d, f, dtype, layout));
}

QuantizedExperts quantized_experts(const ModelConfig& c, WeightFormat quantization) {
  const MatmulLayout layout = c.quantization.quantized()
                                  ? checkpoint_layout(quantization, c.quantization)
                                  : load_time_layout(quantization, false);
  QuantizedExperts experts;
  experts.format = quantization;
  experts.group_size = std::max(layout.group_size, 0);
  experts.act_order = layout.act_order;
  experts.hidden = c.hidden_size;
  experts.width = c.moe.expert_intermediate_size;
  return experts;
}

Status check_moe_runs(const ModelConfig& c, WeightFormat quantization, Backend& backend) {
  if (c.moe.num_experts == 0) return Ok{};
  if (backend.moe_ops() == nullptr) {
    const DeviceInfo dev = backend.device_info();
    return user_error(moe_model(c) + " but the " + dev.kind + " backend (" + dev.name +
                      ") has no mixture-of-experts ops (router softmax/top-k, expert MLPs); "
                      "run it with --device cpu or cuda");
  }
  IB_TRY(check_moe_quantization(c, quantization));
  if (quantization == WeightFormat::kDense) return Ok{};
  const QuantizedExperts experts = quantized_experts(c, quantization);
  if (!backend.moe_ops()->runs_quantized_experts(experts)) {
    const DeviceInfo dev = backend.device_info();
    const std::string groups =
        experts.group_size > 0 ? "groups of " + std::to_string(experts.group_size) : "per row";
    const std::string taken = backend.moe_ops()->quantized_experts_taken();
    return user_error(moe_model(c) + ": the " + dev.kind + " backend (" + dev.name +
                      ") does not run its experts in " +
                      (c.quantization.quantized() ? c.quantization.format
                                                  : std::string(weight_format_name(quantization))) +
                      " (" + groups + (experts.act_order ? ", act-order" : "") + ") (it takes " +
                      (taken.empty() ? std::string("dense experts only") : taken) +
                      "; the CPU backend runs every format); use --device cpu or another "
                      "--quantization");
  }
  return Ok{};
}

}  // namespace detail
}  // namespace ib
