// The layouts of matmul weights (MatmulLayout): their groups, their bytes and their description.
#include <array>
#include <string>
#include <vector>

#include "engine/detail/weight_storage.h"
#include "engine/engine_config.h"

namespace ib {
namespace detail {

std::array<std::array<int64_t, 2>, 4> matmul_shapes(const ModelConfig& c) {
  const int64_t d = c.hidden_size;
  const int64_t q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim;
  // A mixture-of-experts layer's experts each have one gate_up and one down of these shapes.
  const int64_t f = c.moe.num_experts > 0 ? c.moe.expert_intermediate_size : c.intermediate_size;
  return {{{q + 2 * kv, d}, {d, q}, {2 * f, d}, {d, f}}};
}

std::string quantization_description(const MatmulLayout& layout, bool static_activations) {
  const std::string acts = static_activations
                               ? "static per-tensor activations (the checkpoint's input_scale)"
                               : "per-token dynamic activations";
  const std::string groups = layout.group_size > 0
                                 ? "groups of " + std::to_string(layout.group_size)
                                 : std::string("one group per row");
  switch (layout.format) {
    case WeightFormat::kFp8E4M3:
      return "fp8 (W8A8 E4M3, per-channel weights, " + acts + ")";
    case WeightFormat::kInt8W8A16:
      return "int8 (W8A16, per-channel symmetric int8 weights)";
    case WeightFormat::kInt8W8A8:
      return "int8-w8a8 (per-channel symmetric int8 weights, " +
             (static_activations ? acts : "per-token dynamic int8 activations") + ")";
    case WeightFormat::kInt4W4A16:
      return layout.name + " (W4A16, " +
             (layout.asymmetric ? "4-bit weights with zero points, "
                                : "symmetric 4-bit weights, ") +
             groups + (layout.act_order ? ", act-order" : "") + ")";
    case WeightFormat::kNf4:
      return "nf4 (4-bit NormalFloat, blocks of " + std::to_string(layout.group_size) + ")";
    case WeightFormat::kGguf:
      return "gguf (the file's matmul weights in their ggml blocks, activations quantized to int8 "
             "per 32 as llama.cpp's CUDA kernels do)";
    case WeightFormat::kDense:
      break;
  }
  return weight_format_name(layout.format);
}

std::vector<std::array<int64_t, 2>> quantizable_shapes(const ModelConfig& c) {
  const auto four = matmul_shapes(c);
  std::vector<std::array<int64_t, 2>> shapes(four.begin(), four.end());
  if (c.moe.num_experts > 0) {
    const int64_t d = c.hidden_size, f = c.moe.expert_intermediate_size;
    shapes.push_back({2 * f, d});
    shapes.push_back({d, f});
  }
  return shapes;
}

Status check_groups(const ModelConfig& c, const MatmulLayout& layout) {
  if (!is_4bit(layout.format)) return Ok{};
  const std::string& name = layout.name;
  for (const auto& [n, k] : quantizable_shapes(c)) {
    const int64_t g = layout.group_size > 0 ? layout.group_size : k;
    if (k % g == 0 && g % 16 == 0) continue;
    return user_error("--quantization " + name + ": model '" + c.name + "' has a matmul weight " +
                      "of " + std::to_string(k) + " input features, which groups of " +
                      std::to_string(g) + " do not tile (4-bit weights need K a multiple of the " +
                      "group size, and the group a multiple of 16); use a model whose hidden " +
                      "and intermediate sizes are multiples of " + std::to_string(g) +
                      ", or --quantization int8 or fp8");
  }
  return Ok{};
}

bool is_4bit_name(const std::string& name) {
  return name == "awq" || name == "gptq" || name == "nf4";
}

MatmulLayout checkpoint_layout(WeightFormat format, const CheckpointQuantization& cq) {
  MatmulLayout layout;
  layout.format = format;
  layout.name = cq.format;
  layout.group_size = cq.group_size;
  layout.asymmetric = cq.zero_points;
  layout.act_order = cq.act_order;
  return layout;
}

}  // namespace detail

MatmulLayout load_time_layout(WeightFormat format, bool asymmetric) {
  MatmulLayout layout;
  layout.format = format;
  layout.name = quantization_name(format, asymmetric);
  layout.asymmetric = asymmetric;
  if (format == WeightFormat::kInt4W4A16) layout.group_size = 128;
  if (format == WeightFormat::kNf4) layout.group_size = 64;
  return layout;
}

int64_t planned_weight_bytes(const ModelConfig& c, DType dt, WeightFormat format) {
  return planned_weight_bytes(c, dt, load_time_layout(format, false));
}

namespace detail {

int64_t matmul_weight_bytes(int64_t n, int64_t k, DType dt, const MatmulLayout& layout) {
  const WeightFormat format = layout.format;
  IB_ASSERT(format != WeightFormat::kGguf, "matmul_weight_bytes: GGUF rows are per weight");
  int64_t bytes = 0;
  auto add = [&](int64_t numel, DType dtype) {
    bytes += (numel * static_cast<int64_t>(dtype_size(dtype)) + 255) / 256 * 256;
  };
  if (format == WeightFormat::kDense) {
    add(n * k, dt);
  } else if (is_4bit(format)) {
    const int64_t groups = layout.group_size > 0 ? k / layout.group_size : 1;
    add(n * k / 2, DType::kU8);  // data: two codes per byte
    if (format == WeightFormat::kNf4) {
      add(n * groups, DType::kF32);  // absmax
    } else {
      add(n * groups, DType::kF16);  // scales
      add(n * groups, DType::kU8);   // zero points
      if (layout.act_order) add(k, DType::kI32);
    }
  } else {
    add(n * k, quantized_data_dtype(format));  // data
    add(n, DType::kF32);                       // per-channel scales
  }
  return bytes;
}

}  // namespace detail

int64_t planned_weight_bytes(const ModelConfig& c, DType dt, const MatmulLayout& layout) {
  const WeightFormat format = layout.format;
  int64_t bytes = 0;
  auto add = [&](int64_t numel, DType dtype) {
    bytes += (numel * static_cast<int64_t>(dtype_size(dtype)) + 255) / 256 * 256;
  };
  const int64_t d = c.hidden_size;
  const int64_t qkv = (int64_t{c.num_heads} + 2 * int64_t{c.num_kv_heads}) * c.head_dim;
  const int64_t v = c.vocab_size;
  add(v * d, dt);
  add(d, dt);
  if (!c.tie_word_embeddings) add(v * d, dt);
  for (int l = 0; l < c.num_layers; ++l) {
    add(d, dt);  // attn_norm
    add(d, dt);  // ffn_norm
    if (c.sandwich_norms) {
      add(d, dt);  // post_attn_norm
      add(d, dt);  // post_ffn_norm
    }
    if (c.mla.kv_lora_rank > 0) {  // DeepSeek-V2: dense (detail::check_moe_runs)
      bytes += detail::mla_layer_bytes(c, l, dt);
      continue;
    }
    if (c.attention_bias) add(qkv, dt);
    const auto shapes = detail::matmul_shapes(c);
    if (c.moe.num_experts > 0) {  // q/k/v, o, then the router and experts
      bytes += detail::moe_layer_bytes(c, dt, layout);
      for (size_t i = 0; i < 2; ++i)
        bytes += detail::matmul_weight_bytes(shapes[i][0], shapes[i][1], dt, layout);
      continue;
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto [n, k] = shapes[i];
      if (format == WeightFormat::kGguf) {  // rows of blocks, padded to the stride
        add(n * gguf_row_stride(layout.gguf.at(static_cast<size_t>(l))[i]), DType::kU8);
      } else {
        bytes += detail::matmul_weight_bytes(n, k, dt, layout);
      }
    }
  }
  return bytes;
}

}  // namespace ib
