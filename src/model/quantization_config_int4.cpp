// config.json's quantization_config of the 4-bit checkpoints the engine loads
// (engine/int4_layouts.h unpacks their tensors): AutoAWQ GEMM, GPTQ, compressed-tensors
// pack-quantized W4A16 and bitsandbytes NF4; a user error naming any other variant.
#include <string>

#include "model/detail/quantization_config.h"

namespace ib::detail {
namespace {

const char* const kSupported4bit = kSupportedQuantizations;

// A group size from config.json: -1 (or 0) one group per row (0 in CheckpointQuantization),
// else a positive multiple of 16.
Status read_group_size(const JsonFields& q, const char* key, int value, int& out) {
  if (value == -1 || value == 0) {
    out = 0;
    return Ok{};
  }
  if (value < 16 || value % 16 != 0) {
    return q.error(std::string("quantization_config \"") + key + "\": " + std::to_string(value) +
                   " is not a group size the engine runs (a positive multiple of 16, or -1 for "
                   "one per output channel); " +
                   kSupported4bit);
  }
  out = value;
  return Ok{};
}

}  // namespace

Status read_awq(const JsonFields& q, CheckpointQuantization& out) {
  IB_ASSIGN_OR_RETURN(const std::string version, q.optional_string("version", "gemm"));
  if (version != "gemm" && version != "GEMM") {
    return q.error("quantization_config \"version\": \"" + version +
                   "\": AutoAWQ's GEMM layout is the one the engine unpacks (GEMV, Marlin, "
                   "exllama and IPEX layouts are not); re-export the model with version "
                   "\"gemm\"; " +
                   kSupported4bit);
  }
  IB_ASSIGN_OR_RETURN(const int w_bit, q.optional_int("w_bit", 4));
  IB_ASSIGN_OR_RETURN(const int bits, q.optional_int("bits", w_bit));
  IB_ASSIGN_OR_RETURN(const bool zero_point, q.optional_bool("zero_point", true));
  if (bits != 4 || !zero_point) {
    return q.error("quantization_config: AWQ with bits " + std::to_string(bits) +
                   (zero_point ? "" : " and zero_point false") + " is not supported; " +
                   kSupported4bit);
  }
  IB_ASSIGN_OR_RETURN(const int q_group, q.optional_int("q_group_size", 128));
  IB_ASSIGN_OR_RETURN(const int group, q.optional_int("group_size", q_group));
  IB_TRY(read_group_size(q, "group_size", group, out.group_size));
  out.format = "awq";
  out.packing = "awq";
  out.zero_points = true;
  return Ok{};
}

Status read_gptq(const JsonFields& q, CheckpointQuantization& out) {
  IB_ASSIGN_OR_RETURN(const int bits, q.optional_int("bits", 4));
  if (bits != 4) {
    return q.error("quantization_config: GPTQ with bits " + std::to_string(bits) +
                   " is not supported (4 only); " + kSupported4bit);
  }
  IB_ASSIGN_OR_RETURN(const std::string fmt, q.optional_string("checkpoint_format", "gptq"));
  if (fmt != "gptq" && fmt != "gptq_v2") {
    return q.error("quantization_config \"checkpoint_format\": \"" + fmt +
                   "\" is not a GPTQ layout the engine unpacks; " + kSupported4bit);
  }
  IB_ASSIGN_OR_RETURN(const bool marlin, q.optional_bool("is_marlin_format", false));
  if (marlin) {
    return q.error(
        "quantization_config \"is_marlin_format\": Marlin-repacked GPTQ is not "
        "supported; " +
        std::string(kSupported4bit));
  }
  IB_ASSIGN_OR_RETURN(const int group, q.optional_int("group_size", 128));
  IB_TRY(read_group_size(q, "group_size", group, out.group_size));
  IB_ASSIGN_OR_RETURN(const bool sym, q.optional_bool("sym", true));
  IB_ASSIGN_OR_RETURN(out.act_order, q.optional_bool("desc_act", false));
  out.format = "gptq";
  out.packing = "gptq";
  out.zero_points = !sym;
  out.zeros_minus_one = fmt == "gptq";
  return Ok{};
}

Status read_bitsandbytes(const JsonFields& q, CheckpointQuantization& out) {
  IB_ASSIGN_OR_RETURN(const bool in_4bit, q.optional_bool("load_in_4bit", false));
  IB_ASSIGN_OR_RETURN(const std::string type, q.optional_string("bnb_4bit_quant_type", "fp4"));
  if (!in_4bit || type != "nf4") {
    return q.error(std::string("quantization_config: bitsandbytes ") +
                   (in_4bit ? "4-bit \"" + type + "\"" : std::string("8-bit (LLM.int8)")) +
                   " weights are not supported; " + kSupported4bit);
  }
  out.format = "nf4";
  out.packing = "bitsandbytes";
  out.group_size = 64;
  return Ok{};
}

Status read_compressed_tensors_w4a16(const JsonFields& q, CheckpointQuantization& out) {
  bool first = true;
  const Status groups =
      for_each_config_group(q, [&](const JsonFields& g, const WeightArgs& w) -> Status {
        IB_ASSIGN_OR_RETURN(auto a, g.optional_object("input_activations"));
        if (w.num_bits != 4 || w.type != "int" ||
            (w.strategy != "group" && w.strategy != "channel") || a) {
          return g.error("pack-quantized weights of " + std::to_string(w.num_bits) + "-bit " +
                         w.type + " with strategy \"" + w.strategy + "\"" +
                         (a ? " and quantized input activations" : "") + " are not supported; " +
                         kSupported4bit);
        }
        int groups_of = 0;
        if (w.strategy == "group")
          IB_TRY(read_group_size(g, "group_size", w.group_size, groups_of));
        const bool act_order = w.actorder == "group";
        if (!first && (groups_of != out.group_size || !w.symmetric != out.zero_points ||
                       act_order != out.act_order)) {
          return g.error("config groups mix 4-bit schemes (group size, zero points or actorder); " +
                         std::string(kSupported4bit));
        }
        out.group_size = groups_of;
        out.zero_points = !w.symmetric;
        out.act_order = act_order;
        first = false;
        return Ok{};
      });
  if (!groups.ok()) return groups;
  // The --quantization whose load-time scheme matches: zero points are awq's, symmetric gptq's.
  out.format = out.zero_points ? "awq" : "gptq";
  out.packing = "compressed-tensors";
  return Ok{};
}

}  // namespace ib::detail
