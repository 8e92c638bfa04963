// Safetensors weights through the architecture's schema (engine/arch): every tensor the schema
// names is checked (present, shape) and no unknown tensor is accepted before anything is copied;
// then each source goes to its rows of the logical weight, converted to the backend dtype (a
// quantized matmul weight's rows go to the staging scratch, quantized once the weight is whole).
// A quantized checkpoint (config.quantization.quantized()) holds each matmul source X.weight in
// F8_E4M3 (FP8) or I8 (INT8) beside X.weight_scale (one per tensor, or one per row): the bytes
// are copied as they are and the scales repeated per row, with no requantization. With static
// activations each source also has X.input_scale (one float); a fused weight (qkv, gate/up) takes
// the largest of its sources', as vLLM does, since its sources share their input.
// A 4-bit checkpoint (config.quantization.packing: AWQ, GPTQ, compressed-tensors W4A16,
// bitsandbytes NF4) holds each source as its format's packed tensors instead (int4_layouts.h):
// they are unpacked on the host into backend/weight.h's layout, rows concatenated per weight.
// load_checkpoint reads any SafetensorsCheckpoint: the GGUF loader (weights_gguf.cpp) gives it a
// GGUF file's tensors, dequantized, under their HF names.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/arch/architecture.h"
#include "engine/detail/language_model_view.h"
#include "engine/detail/weight_storage.h"
#include "engine/int4_layouts.h"
#include "model/safetensors.h"

namespace ib::detail {

bool is_matmul_role(WeightRole role) {
  return role == WeightRole::kQkv || role == WeightRole::kO || role == WeightRole::kGateUp ||
         role == WeightRole::kDown || role == WeightRole::kExpertGateUp ||
         role == WeightRole::kExpertDown;
}

int matmul_index(WeightRole role) {
  return role == WeightRole::kQkv      ? 0
         : role == WeightRole::kO      ? 1
         : role == WeightRole::kGateUp ? 2
                                       : 3;
}

WeightRef* matmul_weight(ModelWeights& w, WeightRole role, int layer, int expert) {
  if (layer < 0) return nullptr;
  LayerWeights& l = w.layers.at(static_cast<size_t>(layer));
  switch (role) {
    case WeightRole::kExpertGateUp:
      return &l.expert_gate_up.at(static_cast<size_t>(expert));
    case WeightRole::kExpertDown:
      return &l.expert_down.at(static_cast<size_t>(expert));
    case WeightRole::kQkv:
      return &l.wqkv;
    case WeightRole::kO:
      return &l.wo;
    case WeightRole::kGateUp:
      return &l.w_gate_up;
    case WeightRole::kDown:
      return &l.w_down;
    default:
      return nullptr;
  }
}

namespace {

// "a, b, c and 12 more"
std::string name_list(const std::vector<std::string>& names, size_t show = 6) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < show; ++i) {
    out += (i ? ", " : "") + std::string("'") + names[i] + "'";
  }
  if (names.size() > show) out += " and " + std::to_string(names.size() - show) + " more";
  return out;
}

std::string where(const SafetensorsCheckpoint& ckpt) {
  const auto files = ckpt.files();
  return files.size() == 1 ? files[0] : std::to_string(files.size()) + " files";
}

// "model.layers.0.mlp.down_proj.weight" -> "model.layers.0.mlp.down_proj.weight_scale".
std::string scale_name(const std::string& weight_name) {
  return weight_name + "_scale";
}

// "model.layers.0.mlp.down_proj.weight" -> "model.layers.0.mlp.down_proj.input_scale".
std::string input_scale_name(const std::string& weight_name) {
  const std::string suffix = ".weight";
  const bool has = weight_name.ends_with(suffix);
  return (has ? weight_name.substr(0, weight_name.size() - suffix.size()) : weight_name) +
         ".input_scale";
}

// The KV-cache scales a checkpoint may hold per layer, K's then V's: vLLM's FP8 checkpoints'
// self_attn.k_scale, and compressed-tensors' self_attn.k_proj.output_scale.
constexpr const char* kKvScaleSuffixes[2][2] = {
    {".self_attn.k_scale", ".self_attn.k_proj.output_scale"},
    {".self_attn.v_scale", ".self_attn.v_proj.output_scale"}};

bool is_kv_scale_name(std::string_view name) {
  if (!name.starts_with("model.layers.")) return false;
  for (const auto& half : kKvScaleSuffixes) {
    for (const char* suffix : half) {
      if (name.ends_with(suffix)) return true;
    }
  }
  return false;
}

// Missing and unexpected tensor names against the schema (with a quantized checkpoint's weight
// scales), as one error naming both, the architecture and what each layer must hold.
Status check_layout(const ModelConfig& c, const WeightSchema& schema,
                    const SafetensorsCheckpoint& ckpt, const CheckpointKind& kind) {
  std::vector<std::string> missing, unexpected;
  std::set<std::string> expected;
  const bool four_bit = !c.quantization.packing.empty();
  for (const SchemaEntry& e : schema.entries) {
    for (const TensorSource& s : e.sources) {
      std::vector<std::string> names = {s.name};
      if (four_bit && is_matmul_role(e.role)) {
        const Int4TensorNames packed = int4_tensor_names(c.quantization, s.name);
        names = packed.required;
        expected.insert(packed.optional.begin(), packed.optional.end());
      } else if (c.quantization.quantized() && is_matmul_role(e.role)) {
        names.push_back(scale_name(s.name));
        if (c.quantization.static_activations) names.push_back(input_scale_name(s.name));
      }
      for (const std::string& name : names) {
        expected.insert(name);
        if (!ckpt.contains(name)) missing.push_back(name);
      }
    }
  }
  for (const std::string& name : ckpt.names()) {
    if (!expected.contains(name) && !schema.ignores(name) && !is_kv_scale_name(name)) {
      unexpected.push_back(name);
    }
  }
  if (missing.empty() && unexpected.empty()) return Ok{};
  std::string msg = std::string(kind.format) + ": " + where(ckpt) + " does not hold a " +
                    schema.architecture + " checkpoint for model '" + c.name + "' (family " +
                    c.family + ", " + std::to_string(c.num_layers) + " layers):";
  if (!missing.empty()) {
    msg += " tensor" + std::string(missing.size() == 1 ? " " : "s ") + name_list(missing) +
           (missing.size() == 1 ? " is" : " are") + " missing;";
  }
  if (!unexpected.empty()) {
    msg += " unexpected tensor" + std::string(unexpected.size() == 1 ? " " : "s ") +
           name_list(unexpected) + ";";
  }
  msg += " the schema expects " + schema.expected_names() + ". " + std::string(kind.config_hint);
  return user_error(msg);
}

// One logical weight's copies: each checkpoint source to its rows of dense, which is the
// weight itself or, for a quantized matmul weight, the staging scratch. From a quantized
// checkpoint, the parts are code rows of the weight's data and row_scales its scales, staged
// here.
struct WeightCopies {
  std::vector<std::pair<HostTensorRef, Tensor>> parts;
  Tensor dense;
  WeightRef* matmul = nullptr;  // set: staging.finish(dense, *matmul) after the parts
  bool prequantized = false;    // a quantized checkpoint's matmul weight: no staging
  std::vector<float> row_scales;
  float input_scale = 0.0f;        // static activations: the largest of the sources' input_scale
  Host4bitWeight packed;           // a 4-bit checkpoint's weight, unpacked: its sources' rows
  std::vector<uint8_t> gguf_rows;  // a kGguf weight: its (N, stride) bytes, sources' blocks
};

// A GGUF file's source of a kGguf weight: its rows of blocks into entry.gguf_rows at the source's
// offset, after checking its shape and that its type is the one the weight's rows were allocated
// for.
Status add_gguf_source(const SafetensorsCheckpoint& ckpt, const CheckpointKind& kind,
                       const TensorSource& s, WeightCopies& entry) {
  const WeightRef& w = *entry.matmul;
  const std::optional<GgmlBlockRows> rows = ckpt.ggml_rows(s.name);
  if (!rows || rows->shape != s.shape) {
    return user_error(std::string(kind.format) + ": tensor '" + s.name + "' is not " +
                      shape_string(s.shape) + " in ggml blocks; " + std::string(kind.config) +
                      " does not match these weights");
  }
  const GgmlType type = w.gguf.type[w.gguf.segment_of(s.row_offset)];
  IB_ASSERT(rows->type == type, "a GGUF source in another type than its weight's rows");
  const int64_t row_bytes = gguf_row_bytes(type, w.cols());
  const int64_t stride = w.data.dim(1);
  if (entry.gguf_rows.empty()) entry.gguf_rows.assign(static_cast<size_t>(w.data.numel()), 0);
  for (int64_t r = 0; r < s.shape[0]; ++r) {
    std::copy_n(rows->bytes.data() + r * row_bytes, row_bytes,
                entry.gguf_rows.begin() + (s.row_offset + r) * stride);
  }
  return Ok{};
}

// A 4-bit checkpoint's source, unpacked (engine/int4_layouts.h) into its rows of entry.packed;
// the sources of a fused weight must share one act-order permutation.
Status add_4bit_source(const ModelConfig& c, const SafetensorsCheckpoint& ckpt,
                       const TensorSource& s, WeightCopies& entry) {
  const WeightRef& w = *entry.matmul;
  const int64_t k = w.cols(), g = w.group_size, rows = s.shape[0];
  if (s.shape.size() != 2 || s.shape[1] != k) {
    return user_error("safetensors: schema source '" + s.name + "' is not (N, " +
                      std::to_string(k) + ")");
  }
  IB_ASSIGN_OR_RETURN(Host4bitWeight part, unpack_4bit(c.quantization, ckpt, s.name, rows, k, g));
  Host4bitWeight& all = entry.packed;
  if (all.data.empty()) {
    all.data.resize(static_cast<size_t>(w.data.numel()));
    (w.format == WeightFormat::kNf4 ? all.absmax.resize(static_cast<size_t>(w.scales.numel()))
                                    : all.scales.resize(static_cast<size_t>(w.scales.numel())));
    all.zeros.resize(static_cast<size_t>(w.zeros.numel()));
    all.input_perm = part.input_perm;
  }
  if (part.input_perm != all.input_perm) {
    return user_error("safetensors: '" + s.name + "' has another act-order permutation (g_idx) " +
                      "than the weights it is fused with; the engine runs one per fused matmul");
  }
  const auto place = [&](const auto& from, auto& to, int64_t per_row) {
    std::copy(from.begin(), from.end(), to.begin() + s.row_offset * per_row);
  };
  place(part.data, all.data, k / 2);
  place(part.scales, all.scales, k / g);
  place(part.absmax, all.absmax, k / g);
  place(part.zeros, all.zeros, k / g);
  return Ok{};
}

// Copies a 4-bit weight's unpacked host tensors into it.
void copy_4bit(Backend& backend, const Host4bitWeight& packed, const WeightRef& w) {
  backend.copy_from_host(w.data, packed.data.data(), DType::kU8);
  if (w.format == WeightFormat::kNf4) {
    backend.copy_from_host(w.scales, packed.absmax.data(), DType::kF32);
    return;
  }
  backend.copy_from_host(w.scales, packed.scales.data(), DType::kF16);
  backend.copy_from_host(w.zeros, packed.zeros.data(), DType::kU8);
  if (!w.input_perm.empty()) {
    IB_ASSERT(packed.input_perm.size() == static_cast<size_t>(w.input_perm.numel()),
              "an act-order weight without its permutation");
    backend.copy_from_host(w.input_perm, packed.input_perm.data(), DType::kI32);
  }
}

float element_as_f32(const HostTensorRef& t, int64_t i) {
  switch (t.dtype) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, static_cast<const char*>(t.data) + i * 4, 4);
      return v;
    }
    case DType::kBF16:
    case DType::kF16: {
      uint16_t b;
      std::memcpy(&b, static_cast<const char*>(t.data) + i * 2, 2);
      return t.dtype == DType::kBF16 ? bf16_bits_to_f32(b) : f16_bits_to_f32(b);
    }
    default:
      return NAN;
  }
}

// A quantized checkpoint's source: its code rows (E4M3 or int8, as the weight's data) and its
// weight_scale, repeated on each row into entry.row_scales at the source's offset.
Status add_quantized_source(const ModelConfig& c, const SafetensorsCheckpoint& ckpt,
                            const TensorSource& s, const HostTensorRef& ref, WeightCopies& entry) {
  const DType codes = entry.matmul->data.dtype;
  if (ref.dtype != codes) {
    return user_error("safetensors: tensor '" + s.name + "' is " +
                      std::string(dtype_name(ref.dtype)) + " but config.json's " +
                      "quantization_config (\"" + c.quantization.quant_method +
                      "\") says the matmul weights are " + std::string(dtype_name(codes)) +
                      "; the files and config.json disagree");
  }
  const std::string sname = scale_name(s.name);
  IB_ASSIGN_OR_RETURN(HostTensorRef scale, ckpt.get(sname));
  const int64_t rows = s.shape[0];
  const bool float_scale =
      scale.dtype == DType::kF32 || scale.dtype == DType::kBF16 || scale.dtype == DType::kF16;
  const bool per_tensor = scale.numel() == 1;
  const bool per_row = scale.numel() == rows && (scale.shape.size() == 1 ||
                                                 (scale.shape.size() == 2 && scale.shape[1] == 1));
  if (!float_scale || !(per_tensor || per_row)) {
    return user_error("safetensors: '" + sname + "' must hold one float scale for the tensor or " +
                      "one per row (" + std::to_string(rows) + " or [" + std::to_string(rows) +
                      ", 1]); it has shape " + shape_string(scale.shape) + " and dtype " +
                      std::string(dtype_name(scale.dtype)));
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float v = element_as_f32(scale, per_tensor ? 0 : r);
    if (!(v > 0.0f) || !std::isfinite(v)) {
      return user_error("safetensors: '" + sname + "' holds a scale that is not a positive " +
                        "finite number; the checkpoint is damaged");
    }
    entry.row_scales[static_cast<size_t>(s.row_offset + r)] = v;
  }
  if (c.quantization.static_activations) {
    const std::string iname = input_scale_name(s.name);
    IB_ASSIGN_OR_RETURN(HostTensorRef input, ckpt.get(iname));
    const float v = input.numel() == 1 ? element_as_f32(input, 0) : NAN;
    if (!(v > 0.0f) || !std::isfinite(v)) {
      return user_error("safetensors: '" + iname + "' must hold one positive finite float (the " +
                        "static activation scale of config.json's quantization_config); it has " +
                        "shape " + shape_string(input.shape) + " and dtype " +
                        std::string(dtype_name(input.dtype)));
    }
    entry.input_scale = std::max(entry.input_scale, v);
  }
  entry.parts.emplace_back(ref, entry.matmul->data.slice_rows(s.row_offset, rows));
  return Ok{};
}

// Each layer's KV-cache scales (LayerWeights::k_scale, v_scale) where the checkpoint has them:
// one positive finite float each; 1.0 otherwise.
Status load_kv_scales(const SafetensorsCheckpoint& ckpt, ModelWeights& w, int first_layer) {
  for (size_t l = 0; l < w.layers.size(); ++l) {
    for (int half = 0; half < 2; ++half) {
      for (const char* suffix : kKvScaleSuffixes[half]) {
        const std::string name =
            "model.layers." + std::to_string(static_cast<size_t>(first_layer) + l) + suffix;
        if (!ckpt.contains(name)) continue;
        IB_ASSIGN_OR_RETURN(HostTensorRef ref, ckpt.get(name));
        const float v = ref.numel() == 1 ? element_as_f32(ref, 0) : NAN;
        if (!(v > 0.0f) || !std::isfinite(v)) {
          return user_error("safetensors: '" + name + "' must hold one positive finite float " +
                            "(the KV-cache scale); it has shape " + shape_string(ref.shape) +
                            " and dtype " + std::string(dtype_name(ref.dtype)));
        }
        (half == 0 ? w.layers[l].k_scale : w.layers[l].v_scale) = v;
        break;
      }
    }
  }
  return Ok{};
}

}  // namespace

Status load_checkpoint(const ModelConfig& part_config, const SafetensorsCheckpoint& ckpt,
                       const CheckpointKind& kind, Backend& backend, DenseStaging& staging,
                       ModelWeights& w, LayerRange layers) {
  // The whole model's config: its schema checks the checkpoint; the part's layers are copied.
  ModelConfig c = part_config;
  if (layers.whole > 0) c.num_layers = layers.whole;
  IB_ASSERT(layers.first >= 0 && layers.first + part_config.num_layers <= c.num_layers,
            "load_checkpoint: a layer range outside the model");
  IB_ASSIGN_OR_RETURN(const Architecture* arch, find_architecture(c));
  const WeightSchema schema = arch->weight_schema(c);
  IB_TRY(check_layout(c, schema, ckpt, kind));
  IB_TRY(load_kv_scales(ckpt, w, layers.first));
  // Shapes first, so a mismatch leaves no weight half-written.
  std::vector<WeightCopies> copies;
  for (const SchemaEntry& whole_entry : schema.entries) {
    if (whole_entry.layer >= 0 && (whole_entry.layer < layers.first ||
                                   whole_entry.layer >= layers.first + part_config.num_layers))
      continue;  // another part's layer
    SchemaEntry e = whole_entry;
    if (e.layer >= 0) e.layer -= layers.first;  // its index in w
    WeightCopies& entry = copies.emplace_back();
    entry.matmul = matmul_weight(w, e.role, e.layer, e.expert);
    entry.prequantized = entry.matmul && c.quantization.quantized();
    // A kGguf weight is copied in its blocks (add_gguf_source): no dense staging.
    const bool gguf = entry.matmul && entry.matmul->format == WeightFormat::kGguf;
    if (entry.prequantized && !gguf) {
      entry.row_scales.assign(static_cast<size_t>(entry.matmul->data.dim(0)), 0.0f);
    } else if (!gguf) {
      entry.dense = entry.matmul ? staging.dense_for(*entry.matmul)
                                 : weight_for(w, e.role, e.layer, e.expert);
    }
    Tensor dst = entry.dense;
    if (dst.rank == 1) dst = dst.reshaped({dst.numel(), 1});  // rows = elements, to slice
    for (const TensorSource& s : e.sources) {
      if (gguf) {
        IB_TRY(add_gguf_source(ckpt, kind, s, entry));
        continue;
      }
      if (entry.prequantized && is_4bit(entry.matmul->format)) {
        IB_TRY(add_4bit_source(c, ckpt, s, entry));
        continue;
      }
      IB_ASSIGN_OR_RETURN(HostTensorRef ref, ckpt.get(s.name));
      if (ref.shape != s.shape) {
        return user_error(std::string(kind.format) + ": tensor '" + s.name + "' has shape " +
                          shape_string(ref.shape) + " but model '" + c.name + "' (" +
                          schema.architecture + ") expects " + shape_string(s.shape) + "; " +
                          std::string(kind.config) + " does not match these weights");
      }
      if (entry.prequantized) {
        IB_TRY(add_quantized_source(c, ckpt, s, ref, entry));
        continue;
      }
      if (ref.dtype != DType::kF32 && ref.dtype != DType::kBF16 && ref.dtype != DType::kF16) {
        return user_error("safetensors: tensor '" + s.name + "' is " +
                          std::string(dtype_name(ref.dtype)) + " but config.json has no " +
                          "quantization_config for it; the files and config.json disagree");
      }
      const Tensor part = dst.slice_rows(s.row_offset, s.shape[0]);
      IB_ASSERT(ref.numel() == part.numel(), "schema source size differs from its weight rows");
      entry.parts.emplace_back(ref, part);
    }
    // The scratch holds one weight at a time: a quantized weight is whole in one entry.
    int64_t rows = 0;
    for (const TensorSource& src : e.sources) rows += src.shape[0];
    IB_ASSERT(!entry.matmul || entry.matmul->format == WeightFormat::kDense ||
                  rows == entry.matmul->data.dim(0),
              "schema: a quantized matmul weight spread over several entries");
  }
  for (const WeightCopies& entry : copies) {
    for (const auto& [ref, dst] : entry.parts) backend.copy_from_host(dst, ref.data, ref.dtype);
    if (!entry.gguf_rows.empty()) {
      backend.copy_from_host(entry.matmul->data, entry.gguf_rows.data(), DType::kU8);
    } else if (entry.prequantized && is_4bit(entry.matmul->format)) {
      copy_4bit(backend, entry.packed, *entry.matmul);
    } else if (entry.prequantized) {
      backend.copy_from_host(entry.matmul->scales, entry.row_scales.data(), DType::kF32);
      entry.matmul->input_scale = entry.input_scale;  // 0 (dynamic) without static activations
    } else if (entry.matmul) {
      staging.finish(entry.dense, *entry.matmul);
    }
  }
  return Ok{};
}

Status load_safetensors(const ModelConfig& c, const std::string& path, Backend& backend,
                        DenseStaging& staging, ModelWeights& w, LayerRange layers) {
  IB_ASSIGN_OR_RETURN(auto ckpt, SafetensorsCheckpoint::open(path));
  if (c.hf_architecture == "LlavaForConditionalGeneration") {
    ckpt = language_model_view(std::move(ckpt));
  } else if (c.hf_architecture == "Qwen2VLForConditionalGeneration") {
    ckpt = language_model_view(std::move(ckpt), ViewLayout::kQwen2Vl);
  }
  const CheckpointKind kind{"safetensors", "the config.json",
                            "Check that config.json (\"architectures\", \"num_hidden_layers\", "
                            "\"tie_word_embeddings\") describes these weights"};
  IB_TRY(load_checkpoint(c, *ckpt, kind, backend, staging, w, layers));
  w.description = "safetensors: " + path + " (" + std::to_string(ckpt->files().size()) +
                  (ckpt->files().size() == 1 ? " file)" : " files)");
  return Ok{};
}

}  // namespace ib::detail
