// The int4 layouts (AutoAWQ GEMM, GPTQ, compressed-tensors pack-quantized) unpacked into
// kInt4W4A16; bitsandbytes NF4 in int4_layouts_nf4.cpp. Each published layout as its format
// describes it:
// - AutoAWQ GEMM: qweight int32 (K, N / 8), qzeros int32 (K / G, N / 8), scales f16 (K / G, N);
//   column 8c + j of a packed int32 c sits in nibble kAwqSlot[j] (AutoAWQ packs the columns in
//   the order 0, 2, 4, 6, 1, 3, 5, 7).
// - GPTQ: qweight int32 (K / 8, N), row 8r + i in nibble i; qzeros int32 (K / G, N / 8), column
//   8c + j in nibble j, storing z - 1 in checkpoint_format "gptq" (v1); scales f16 (K / G, N);
//   g_idx int32 (K), the group of each input feature (act-order when desc_act).
// - compressed-tensors: weight_packed int32 (N, K / 8), k = 8c + i in nibble i, each q + 8 of
//   the signed q in [-8, 7]; weight_scale (N, K / G) or (N, 1); weight_shape (2) = [N, K];
//   weight_zero_point int32 (N / 8, K / G) packed along N, also + 8 (absent: symmetric, z = 8);
//   weight_g_idx int32 (K) with actorder "group".
#include "engine/int4_layouts.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "engine/detail/int4_unpack.h"

namespace ib {
namespace {

using detail::ShapeCheck;

// AWQ's interleave: the nibble holding column j of each group of eight.
constexpr int kAwqSlot[8] = {0, 4, 1, 5, 2, 6, 3, 7};

uint8_t nibble(int32_t word, int slot) {
  return static_cast<uint8_t>((static_cast<uint32_t>(word) >> (4 * slot)) & 0xFu);
}

std::string prefix_of(const std::string& weight_name) {
  const std::string suffix = ".weight";
  return weight_name.ends_with(suffix) ? weight_name.substr(0, weight_name.size() - suffix.size())
                                       : weight_name;
}

// Sorts input features by group (g_idx) into input_perm, so that groups are contiguous: each
// group must hold exactly G features.
Status act_order_perm(const std::string& name, const HostTensorRef& g_idx, int64_t k, int64_t g,
                      std::vector<int32_t>& perm) {
  std::vector<int64_t> count(static_cast<size_t>(k / g), 0);
  for (int64_t i = 0; i < k; ++i) {
    const int32_t gi = detail::i32_at(g_idx, i);
    if (gi < 0 || gi >= k / g || ++count[static_cast<size_t>(gi)] > g) {
      return user_error("safetensors: '" + name + "' assigns input features to groups that are " +
                        "not " + std::to_string(k / g) + " groups of " + std::to_string(g) +
                        " (a group index outside [0, " + std::to_string(k / g) +
                        ") or a group over-full); the checkpoint contradicts config.json's "
                        "group_size");
    }
  }
  perm.resize(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) {
    return detail::i32_at(g_idx, a) < detail::i32_at(g_idx, b);
  });
  return Ok{};
}

// g_idx without desc_act must be the trivial k / G.
Status check_plain_g_idx(const std::string& name, const HostTensorRef& g_idx, int64_t k,
                         int64_t g) {
  for (int64_t i = 0; i < k; ++i) {
    if (detail::i32_at(g_idx, i) != i / g) {
      return user_error("safetensors: '" + name + "' orders input features out of their groups " +
                        "(act-order) but config.json's quantization_config has no desc_act / " +
                        "actorder \"group\"; the files and config.json disagree");
    }
  }
  return Ok{};
}

// w[n][j] = code(perm[j] or j, n), scale/zero of group j / G per row.
template <typename Code, typename Scale, typename Zero>
Host4bitWeight repack_int4(int64_t n, int64_t k, int64_t g, std::vector<int32_t> perm, Code code,
                           Scale scale_bits, Zero zero) {
  Host4bitWeight out;
  out.data.assign(static_cast<size_t>(n * k / 2), 0);
  out.scales.resize(static_cast<size_t>(n * (k / g)));
  out.zeros.resize(out.scales.size());
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      const uint8_t q = code(perm.empty() ? j : perm[static_cast<size_t>(j)], r);
      out.data[static_cast<size_t>(r * k / 2 + j / 2)] |= static_cast<uint8_t>(q << (4 * (j % 2)));
    }
    for (int64_t gi = 0; gi < k / g; ++gi) {
      out.scales[static_cast<size_t>(r * (k / g) + gi)] = scale_bits(gi, r);
      out.zeros[static_cast<size_t>(r * (k / g) + gi)] = zero(gi, r);
    }
  }
  out.input_perm = std::move(perm);
  return out;
}

Result<Host4bitWeight> unpack_awq(const std::string& p, const ShapeCheck& check, int64_t n,
                                  int64_t k, int64_t g) {
  IB_ASSIGN_OR_RETURN(HostTensorRef qweight, check.get(p + ".qweight", DType::kI32, {k, n / 8}));
  IB_ASSIGN_OR_RETURN(HostTensorRef qzeros, check.get(p + ".qzeros", DType::kI32, {k / g, n / 8}));
  IB_ASSIGN_OR_RETURN(HostTensorRef scales, check.get_float(p + ".scales", {k / g, n}));
  return repack_int4(
      n, k, g, {},
      [&](int64_t kk, int64_t nn) {
        return nibble(detail::i32_at(qweight, kk * (n / 8) + nn / 8), kAwqSlot[nn % 8]);
      },
      [&](int64_t gi, int64_t nn) { return detail::f16_bits_at(scales, gi * n + nn); },
      [&](int64_t gi, int64_t nn) {
        return nibble(detail::i32_at(qzeros, gi * (n / 8) + nn / 8), kAwqSlot[nn % 8]);
      });
}

Result<Host4bitWeight> unpack_gptq(const CheckpointQuantization& q,
                                   const SafetensorsCheckpoint& ckpt, const std::string& p,
                                   const ShapeCheck& check, int64_t n, int64_t k, int64_t g) {
  IB_ASSIGN_OR_RETURN(HostTensorRef qweight, check.get(p + ".qweight", DType::kI32, {k / 8, n}));
  IB_ASSIGN_OR_RETURN(HostTensorRef qzeros, check.get(p + ".qzeros", DType::kI32, {k / g, n / 8}));
  IB_ASSIGN_OR_RETURN(HostTensorRef scales, check.get_float(p + ".scales", {k / g, n}));
  std::vector<int32_t> perm;
  if (q.act_order || ckpt.contains(p + ".g_idx")) {
    IB_ASSIGN_OR_RETURN(HostTensorRef g_idx, check.get(p + ".g_idx", DType::kI32, {k}));
    if (q.act_order) {
      IB_TRY(act_order_perm(p + ".g_idx", g_idx, k, g, perm));
    } else {
      IB_TRY(check_plain_g_idx(p + ".g_idx", g_idx, k, g));
    }
  }
  // v1 stores z - 1 (mod 16): a stored 15 is the zero point 0.
  const int zero_offset = q.zeros_minus_one ? 1 : 0;
  return repack_int4(
      n, k, g, std::move(perm),
      [&](int64_t kk, int64_t nn) {
        return nibble(detail::i32_at(qweight, (kk / 8) * n + nn), static_cast<int>(kk % 8));
      },
      [&](int64_t gi, int64_t nn) { return detail::f16_bits_at(scales, gi * n + nn); },
      [&](int64_t gi, int64_t nn) {
        const int z =
            nibble(detail::i32_at(qzeros, gi * (n / 8) + nn / 8), static_cast<int>(nn % 8));
        return static_cast<uint8_t>((z + zero_offset) & 0xF);
      });
}

Result<Host4bitWeight> unpack_compressed(const CheckpointQuantization& q, const std::string& p,
                                         const ShapeCheck& check, int64_t n, int64_t k, int64_t g) {
  IB_ASSIGN_OR_RETURN(HostTensorRef packed,
                      check.get(p + ".weight_packed", DType::kI32, {n, k / 8}));
  IB_ASSIGN_OR_RETURN(HostTensorRef scales, check.get_float(p + ".weight_scale", {n, k / g}));
  IB_TRY(check.weight_shape(p + ".weight_shape", n, k));
  HostTensorRef zero_points;
  if (q.zero_points) {
    IB_ASSIGN_OR_RETURN(zero_points,
                        check.get(p + ".weight_zero_point", DType::kI32, {n / 8, k / g}));
  }
  std::vector<int32_t> perm;
  if (q.act_order) {
    IB_ASSIGN_OR_RETURN(HostTensorRef g_idx, check.get(p + ".weight_g_idx", DType::kI32, {k}));
    IB_TRY(act_order_perm(p + ".weight_g_idx", g_idx, k, g, perm));
  }
  return repack_int4(
      n, k, g, std::move(perm),
      [&](int64_t kk, int64_t nn) {
        return nibble(detail::i32_at(packed, nn * (k / 8) + kk / 8), static_cast<int>(kk % 8));
      },
      [&](int64_t gi, int64_t nn) { return detail::f16_bits_at(scales, nn * (k / g) + gi); },
      [&](int64_t gi, int64_t nn) {
        if (!q.zero_points) return uint8_t{8};
        return nibble(detail::i32_at(zero_points, (nn / 8) * (k / g) + gi),
                      static_cast<int>(nn % 8));
      });
}

}  // namespace

Int4TensorNames int4_tensor_names(const CheckpointQuantization& q, const std::string& weight_name) {
  const std::string p = prefix_of(weight_name);
  if (q.packing == "awq") return {{p + ".qweight", p + ".qzeros", p + ".scales"}, {}};
  if (q.packing == "gptq") {
    Int4TensorNames names{{p + ".qweight", p + ".qzeros", p + ".scales"}, {}};
    (q.act_order ? names.required : names.optional).push_back(p + ".g_idx");
    return names;
  }
  if (q.packing == "compressed-tensors") {
    Int4TensorNames names{{p + ".weight_packed", p + ".weight_scale", p + ".weight_shape"}, {}};
    if (q.zero_points) names.required.push_back(p + ".weight_zero_point");
    if (q.act_order) names.required.push_back(p + ".weight_g_idx");
    return names;
  }
  return detail::nf4_tensor_names(weight_name);
}

Result<Host4bitWeight> unpack_4bit(const CheckpointQuantization& q,
                                   const SafetensorsCheckpoint& ckpt,
                                   const std::string& weight_name, int64_t n, int64_t k,
                                   int64_t group_size) {
  const ShapeCheck check{ckpt, q, n, k, group_size};
  IB_TRY(check.divisible(weight_name));
  const std::string p = prefix_of(weight_name);
  if (q.packing == "awq") return unpack_awq(p, check, n, k, group_size);
  if (q.packing == "gptq") return unpack_gptq(q, ckpt, p, check, n, k, group_size);
  if (q.packing == "compressed-tensors") return unpack_compressed(q, p, check, n, k, group_size);
  return detail::unpack_nf4(check, weight_name, n, k, group_size);
}

}  // namespace ib
