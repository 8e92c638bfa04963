// Private to model/: reads config.json's quantization_config into CheckpointQuantization.
#pragma once

#include <functional>
#include <string>

#include "model/config.h"
#include "model/detail/json_fields.h"

namespace ib::detail {

// Absent: a dense checkpoint. A format the engine cannot load: a user error naming
// quant_method (or the scheme) and what is supported.
Status read_quantization_config(const JsonFields& config, CheckpointQuantization& out);

// What the engine loads, for the end of each refusal ("supported: ...").
extern const char* const kSupportedQuantizations;

// compressed-tensors' config_groups: visit(group, its weights' arguments) for each, in order; a
// missing or malformed group is an error naming it.
struct WeightArgs {
  int num_bits = 0;
  std::string type;      // "int", "float"
  std::string strategy;  // "tensor", "channel", "group"
  bool symmetric = true;
  int group_size = 0;    // strategy "group"
  std::string actorder;  // "", "group", "weight"
};
Status for_each_config_group(
    const JsonFields& q, const std::function<Status(const JsonFields&, const WeightArgs&)>& visit);

// The 4-bit methods (quantization_config_int4.cpp), each given quantization_config: quant_method
// "awq", "gptq", "bitsandbytes", and "compressed-tensors" with format "pack-quantized".
Status read_awq(const JsonFields& q, CheckpointQuantization& out);
Status read_gptq(const JsonFields& q, CheckpointQuantization& out);
Status read_bitsandbytes(const JsonFields& q, CheckpointQuantization& out);
Status read_compressed_tensors_w4a16(const JsonFields& q, CheckpointQuantization& out);

}  // namespace ib::detail
