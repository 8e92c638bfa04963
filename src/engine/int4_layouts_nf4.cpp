// bitsandbytes NF4 (load_in_4bit, bnb_4bit_quant_type "nf4") unpacked into kNf4. As bitsandbytes
// serialises a Linear4bit weight X.weight (N, K):
// - X.weight: uint8, N * K / 2 bytes (stored (N * K / 2, 1)), the row-major weight two codes per
//   byte, element 2j in the high nibble: already weight.h's kNf4 data, rows of K / 2 bytes.
// - X.weight.quant_map: float32 (16), the NF4 levels.
// - X.weight.absmax: one scale per block of blocksize (64) consecutive elements: float32, or with
//   double quantization uint8 codes into X.weight.nested_quant_map (float32 (256)), times
//   X.weight.nested_absmax (float32, one per nested_blocksize codes), plus nested_offset:
//   absmax[i] = nested_quant_map[code[i]] * nested_absmax[i / nested_blocksize] + offset.
// - X.weight.quant_state.bitsandbytes__nf4: uint8, the UTF-8 JSON of quant_type, blocksize,
//   dtype, shape and, when double-quantized, nested_blocksize, nested_dtype and nested_offset.
#include <cmath>

#include <nlohmann/json.hpp>

#include "backend/weight.h"
#include "engine/detail/int4_unpack.h"

namespace ib::detail {
namespace {

struct Nf4State {
  bool nested = false;
  int64_t nested_blocksize = 0;
  float offset = 0.0f;
};

Result<Nf4State> read_quant_state(const ShapeCheck& check, const std::string& name) {
  IB_ASSIGN_OR_RETURN(HostTensorRef t, check.ckpt.get(name));
  const auto bad = [&](const std::string& why) -> Error {
    return user_error("safetensors: '" + name + "' (bitsandbytes' quant_state JSON) " + why + "; " +
                      check.context() + " needs quant_type \"nf4\", blocksize " +
                      std::to_string(check.g) + " and shape [" + std::to_string(check.n) + ", " +
                      std::to_string(check.k) + "]");
  };
  if (t.dtype != DType::kU8) return bad("is not uint8 bytes");
  const char* bytes = static_cast<const char*>(t.data);
  const auto json = nlohmann::json::parse(bytes, bytes + t.numel(), nullptr, false);
  if (json.is_discarded() || !json.is_object()) return bad("is not a JSON object");
  const auto shape = json.value("shape", nlohmann::json::array());
  if (json.value("quant_type", "") != "nf4") return bad("does not say quant_type \"nf4\"");
  if (json.value("blocksize", 0) != check.g) return bad("has another blocksize");
  if (shape != nlohmann::json::array({check.n, check.k})) return bad("has another shape");
  Nf4State s;
  s.nested = json.contains("nested_offset");
  if (s.nested) {
    const auto& offset = json["nested_offset"];
    s.nested_blocksize = json.value("nested_blocksize", int64_t{0});
    if (!offset.is_number() || s.nested_blocksize <= 0) {
      return bad("has no numeric nested_offset and positive nested_blocksize");
    }
    s.offset = offset.get<float>();
  }
  return s;
}

}  // namespace

Int4TensorNames nf4_tensor_names(const std::string& w) {
  return {{w, w + ".absmax", w + ".quant_map", w + ".quant_state.bitsandbytes__nf4"},
          {w + ".nested_absmax", w + ".nested_quant_map"}};
}

Result<Host4bitWeight> unpack_nf4(const ShapeCheck& check, const std::string& w, int64_t n,
                                  int64_t k, int64_t g) {
  IB_ASSIGN_OR_RETURN(const Nf4State state,
                      read_quant_state(check, w + ".quant_state.bitsandbytes__nf4"));
  IB_ASSIGN_OR_RETURN(HostTensorRef codes, check.get_flat(w, DType::kU8, n * k / 2));
  IB_ASSIGN_OR_RETURN(HostTensorRef levels, check.get_flat(w + ".quant_map", DType::kF32, 16));
  for (int i = 0; i < 16; ++i) {
    if (std::fabs(f32_at(levels, i) - kNf4Levels[i]) > 1e-6f) {
      return user_error("safetensors: '" + w + ".quant_map' is not bitsandbytes' NF4 levels " +
                        "(level " + std::to_string(i) + " differs); the checkpoint is not NF4");
    }
  }
  const int64_t blocks = n * k / g;
  Host4bitWeight out;
  const auto* bytes = static_cast<const uint8_t*>(codes.data);
  out.data.assign(bytes, bytes + n * k / 2);
  out.absmax.resize(static_cast<size_t>(blocks));
  if (!state.nested) {
    IB_ASSIGN_OR_RETURN(HostTensorRef absmax, check.get_flat(w + ".absmax", DType::kF32, blocks));
    for (int64_t i = 0; i < blocks; ++i) out.absmax[static_cast<size_t>(i)] = f32_at(absmax, i);
    return out;
  }
  const int64_t nb = state.nested_blocksize;
  IB_ASSIGN_OR_RETURN(HostTensorRef qabsmax, check.get_flat(w + ".absmax", DType::kU8, blocks));
  IB_ASSIGN_OR_RETURN(HostTensorRef code2,
                      check.get_flat(w + ".nested_quant_map", DType::kF32, 256));
  IB_ASSIGN_OR_RETURN(HostTensorRef absmax2,
                      check.get_flat(w + ".nested_absmax", DType::kF32, (blocks + nb - 1) / nb));
  const auto* q = static_cast<const uint8_t*>(qabsmax.data);
  for (int64_t i = 0; i < blocks; ++i) {
    out.absmax[static_cast<size_t>(i)] =
        f32_at(code2, q[i]) * f32_at(absmax2, i / nb) + state.offset;
  }
  return out;
}

}  // namespace ib::detail
