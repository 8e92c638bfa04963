// config.json's quantization_config: the pre-quantized checkpoint formats the engine loads (FP8
// W8A8 with dynamic activation scales), and a user error naming anything else.
#include "model/detail/quantization_config.h"

#include <string>

namespace ib::detail {
namespace {

const char* const kSupported =
    "supported: \"fp8\" (dynamic activation scheme) and \"compressed-tensors\" with 8-bit float "
    "weights and dynamic activations; or use the unquantized checkpoint with --quantization fp8";

// quant_method "fp8": E4M3 weights, one scale per tensor (weight_scale), activations quantized at
// run time (activation_scheme "dynamic"), or by a calibrated input_scale ("static").
Status read_fp8(const JsonFields& q, CheckpointQuantization& out) {
  IB_ASSIGN_OR_RETURN(const std::string scheme, q.optional_string("activation_scheme", "dynamic"));
  if (scheme != "dynamic") {
    return q.error("quantization_config \"activation_scheme\": \"" + scheme +
                   "\" (calibrated input_scale per layer) is not supported yet; the engine "
                   "quantizes activations per token at run time; " +
                   kSupported);
  }
  if (q.has("weight_block_size")) {
    return q.error(
        "quantization_config \"weight_block_size\": block-wise FP8 weights are not "
        "supported; " +
        std::string(kSupported));
  }
  out.fp8_weights = true;
  out.per_channel_scales = false;
  return Ok{};
}

// compressed-tensors: every config group must be FP8 weights (num_bits 8, type "float", strategy
// "tensor" or "channel") with dynamic input activations (or none).
Status read_compressed_tensors(const JsonFields& q, CheckpointQuantization& out) {
  IB_ASSIGN_OR_RETURN(auto groups, q.optional_object("config_groups"));
  if (!groups || groups->json().empty()) {
    return q.error("quantization_config: compressed-tensors without \"config_groups\"; " +
                   std::string(kSupported));
  }
  bool first = true;
  for (const auto& [name, group] : groups->json().items()) {
    if (!group.is_object()) return q.error("config_groups." + name + " must be an object");
    const JsonFields g(group, q.where() + ": config_groups." + name);
    IB_ASSIGN_OR_RETURN(auto w, g.optional_object("weights"));
    if (!w) return g.error("has no \"weights\"; " + std::string(kSupported));
    IB_ASSIGN_OR_RETURN(const int bits, w->optional_int("num_bits", 0));
    IB_ASSIGN_OR_RETURN(const std::string type, w->optional_string("type", ""));
    IB_ASSIGN_OR_RETURN(const std::string strategy, w->optional_string("strategy", ""));
    if (bits != 8 || type != "float" || (strategy != "tensor" && strategy != "channel")) {
      return g.error("weights of " + std::to_string(bits) + "-bit " + type + " with strategy \"" +
                     strategy + "\" are not supported; " + kSupported);
    }
    IB_ASSIGN_OR_RETURN(auto a, g.optional_object("input_activations"));
    if (a) {
      IB_ASSIGN_OR_RETURN(const bool dynamic, a->optional_bool("dynamic", false));
      if (!dynamic) {
        return g.error(
            "static input activations (calibrated input_scale) are not supported "
            "yet; " +
            std::string(kSupported));
      }
    }
    const bool per_channel = strategy == "channel";
    if (!first && per_channel != out.per_channel_scales) {
      return g.error("config groups mix per-tensor and per-channel weight scales; " +
                     std::string(kSupported));
    }
    out.per_channel_scales = per_channel;
    first = false;
  }
  out.fp8_weights = true;
  return Ok{};
}

}  // namespace

Status read_quantization_config(const JsonFields& f, CheckpointQuantization& out) {
  out = CheckpointQuantization{};
  IB_ASSIGN_OR_RETURN(auto q, f.optional_object("quantization_config"));
  if (!q) return Ok{};
  IB_ASSIGN_OR_RETURN(out.quant_method, q->optional_string("quant_method", ""));
  if (out.quant_method == "fp8") return read_fp8(*q, out);
  if (out.quant_method == "compressed-tensors") return read_compressed_tensors(*q, out);
  return q->error("quantization_config \"quant_method\": \"" + out.quant_method +
                  "\" is not a format the engine runs; " + kSupported);
}

}  // namespace ib::detail
