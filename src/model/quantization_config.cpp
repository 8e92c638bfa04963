// config.json's quantization_config: the pre-quantized checkpoint formats the engine loads (FP8
// W8A8 and INT8 W8A8 / W8A16, with dynamic activation scales or a static per-tensor input_scale;
// the 4-bit ones in quantization_config_int4.cpp), and a user error naming anything else.
#include "model/detail/quantization_config.h"

#include <functional>
#include <string>

namespace ib::detail {

const char* const kSupportedQuantizations =
    "supported: \"fp8\" (dynamic or static activation scheme) and \"compressed-tensors\" with "
    "8-bit float weights and dynamic or static per-tensor symmetric activations, or 8-bit "
    "symmetric int weights (format int-quantized or naive-quantized) with int8 activations "
    "(dynamic per token, or static per tensor and symmetric) or none, or 4-bit int weights "
    "(format pack-quantized, strategy group or channel, no input activations); \"awq\" "
    "(AutoAWQ GEMM: version \"gemm\", zero_point true), \"gptq\" (bits 4, checkpoint_format "
    "\"gptq\" or \"gptq_v2\") and \"bitsandbytes\" (load_in_4bit, bnb_4bit_quant_type \"nf4\", "
    "blocks of 64); or use the unquantized checkpoint with --quantization fp8, int8, int8-w8a8, "
    "awq, gptq or nf4";

Status for_each_config_group(
    const JsonFields& q, const std::function<Status(const JsonFields&, const WeightArgs&)>& visit) {
  IB_ASSIGN_OR_RETURN(auto groups, q.optional_object("config_groups"));
  if (!groups || groups->json().empty()) {
    return q.error("quantization_config: compressed-tensors without \"config_groups\"; " +
                   std::string(kSupportedQuantizations));
  }
  for (const auto& [name, group] : groups->json().items()) {
    if (!group.is_object()) return q.error("config_groups." + name + " must be an object");
    const JsonFields g(group, q.where() + ": config_groups." + name);
    IB_ASSIGN_OR_RETURN(auto w, g.optional_object("weights"));
    if (!w) return g.error("has no \"weights\"; " + std::string(kSupportedQuantizations));
    WeightArgs args;
    IB_ASSIGN_OR_RETURN(args.num_bits, w->optional_int("num_bits", 0));
    IB_ASSIGN_OR_RETURN(args.type, w->optional_string("type", ""));
    IB_ASSIGN_OR_RETURN(args.strategy, w->optional_string("strategy", ""));
    IB_ASSIGN_OR_RETURN(args.symmetric, w->optional_bool("symmetric", true));
    IB_ASSIGN_OR_RETURN(args.group_size, w->optional_int("group_size", 0));
    IB_ASSIGN_OR_RETURN(args.actorder, w->optional_string("actorder", ""));
    IB_TRY(visit(g, args));
  }
  return Ok{};
}

namespace {

const char* const kSupported = kSupportedQuantizations;

// quant_method "fp8": E4M3 weights, one scale per tensor (weight_scale), activations quantized at
// run time (activation_scheme "dynamic"), or by a calibrated input_scale ("static").
Status read_fp8(const JsonFields& q, CheckpointQuantization& out) {
  IB_ASSIGN_OR_RETURN(const std::string scheme, q.optional_string("activation_scheme", "dynamic"));
  if (scheme != "dynamic" && scheme != "static") {
    return q.error("quantization_config \"activation_scheme\": \"" + scheme +
                   "\" is not a scheme the engine runs; " + kSupported);
  }
  out.static_activations = scheme == "static";
  if (q.has("weight_block_size")) {
    return q.error(
        "quantization_config \"weight_block_size\": block-wise FP8 weights are not "
        "supported; " +
        std::string(kSupported));
  }
  out.format = "fp8";
  out.per_channel_scales = false;
  return Ok{};
}

// compressed-tensors: every config group must be 8-bit weights (num_bits 8, strategy "tensor" or
// "channel"), all of one type: "float" (FP8, dynamic input activations or none) or "int"
// (symmetric, stored unpacked; input activations dynamic 8-bit int per token: W8A8, or none:
// W8A16).
Status read_compressed_tensors(const JsonFields& q, CheckpointQuantization& out) {
  bool first = true;
  const Status groups =
      for_each_config_group(q, [&](const JsonFields& g, const WeightArgs& w) -> Status {
        const auto& [bits, type, strategy, symmetric, group_size, actorder] = w;
        if (bits != 8 || (type != "float" && type != "int") ||
            (strategy != "tensor" && strategy != "channel")) {
          return g.error("weights of " + std::to_string(bits) + "-bit " + type +
                         " with strategy \"" + strategy + "\" are not supported; " + kSupported);
        }
        if (!symmetric) {
          return g.error("asymmetric weights (a weight_zero_point per scale) are not supported; " +
                         std::string(kSupported));
        }
        IB_ASSIGN_OR_RETURN(auto a, g.optional_object("input_activations"));
        if (a) {
          IB_ASSIGN_OR_RETURN(const bool dynamic, a->optional_bool("dynamic", false));
          IB_ASSIGN_OR_RETURN(const std::string a_strategy, a->optional_string("strategy", ""));
          IB_ASSIGN_OR_RETURN(const bool a_symmetric, a->optional_bool("symmetric", true));
          if (!dynamic && (a_strategy != "tensor" || !a_symmetric)) {
            return g.error(
                "static input activations with strategy \"" + a_strategy + "\"" +
                (a_symmetric ? "" : " and a zero point (asymmetric)") +
                " are not supported: static input_scale runs per tensor and symmetric; " +
                std::string(kSupported));
          }
          if (!first && !dynamic != out.static_activations) {
            return g.error("config groups mix static and dynamic input activations; " +
                           std::string(kSupported));
          }
          out.static_activations = !dynamic;
          IB_ASSIGN_OR_RETURN(const int a_bits, a->optional_int("num_bits", 0));
          IB_ASSIGN_OR_RETURN(const std::string a_type, a->optional_string("type", ""));
          if (a_bits != 8 || a_type != type) {
            return g.error("input activations of " + std::to_string(a_bits) + "-bit " + a_type +
                           " with " + type + " weights are not supported; " + kSupported);
          }
        }
        const std::string format =
            type == "float" ? "fp8" : (a ? std::string("int8-w8a8") : std::string("int8"));
        if (!first && format != out.format) {
          return g.error("config groups mix weight formats (" + out.format + " and " + format +
                         "); " + kSupported);
        }
        out.format = format;
        const bool per_channel = strategy == "channel";
        if (!first && per_channel != out.per_channel_scales) {
          return g.error("config groups mix per-tensor and per-channel weight scales; " +
                         std::string(kSupported));
        }
        out.per_channel_scales = per_channel;
        first = false;
        return Ok{};
      });
  if (!groups.ok()) return groups;
  if (out.format != "fp8") {
    IB_ASSIGN_OR_RETURN(const std::string packing, q.optional_string("format", ""));
    if (packing != "int-quantized" && packing != "naive-quantized") {
      return q.error("quantization_config \"format\": \"" + packing +
                     "\": int8 weights are loaded as stored I8 tensors (\"int-quantized\" or "
                     "\"naive-quantized\"); packed int32 weights (weight_packed) load as 4-bit "
                     "pack-quantized only; " +
                     std::string(kSupported));
    }
  }
  return Ok{};
}

}  // namespace

Status read_quantization_config(const JsonFields& f, CheckpointQuantization& out) {
  out = CheckpointQuantization{};
  IB_ASSIGN_OR_RETURN(auto q, f.optional_object("quantization_config"));
  if (!q) return Ok{};
  IB_ASSIGN_OR_RETURN(out.quant_method, q->optional_string("quant_method", ""));
  if (out.quant_method == "fp8") return read_fp8(*q, out);
  if (out.quant_method == "awq") return read_awq(*q, out);
  if (out.quant_method == "gptq") return read_gptq(*q, out);
  if (out.quant_method == "bitsandbytes") return read_bitsandbytes(*q, out);
  if (out.quant_method == "compressed-tensors") {
    IB_ASSIGN_OR_RETURN(const std::string packing, q->optional_string("format", ""));
    if (packing == "pack-quantized") return read_compressed_tensors_w4a16(*q, out);
    return read_compressed_tensors(*q, out);
  }
  return q->error("quantization_config \"quant_method\": \"" + out.quant_method +
                  "\" is not a format the engine runs; " + kSupported);
}

}  // namespace ib::detail
