// The CPU backend's mixture-of-experts ops (MoeOps): routing per token, then each expert's SwiGLU
// MLP on the rows routed to it (gathered, so an expert's weights are read once per step), scaled
// and added into the output in ascending expert order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/detail/kernels.h"

namespace ib {
namespace cpu {

void route_token_grouped(const float* logits, int num_experts, int top_k, const MoeRouting& routing,
                         int32_t* ids, float* weights) {
  const auto e = static_cast<size_t>(num_experts);
  std::vector<float> p(logits, logits + e);
  const float max_logit = *std::max_element(p.begin(), p.end());
  float sum = 0.0f;
  for (float& v : p) sum += (v = std::exp(v - max_logit));
  for (float& v : p) v /= sum;
  std::vector<float> competing = p;  // p, or 0 outside the groups kept
  if (routing.num_groups > 1) {
    const auto groups = static_cast<size_t>(routing.num_groups);
    const size_t per_group = e / groups;
    std::vector<float> best(groups);
    for (size_t g = 0; g < groups; ++g) {
      best[g] = *std::max_element(p.begin() + static_cast<std::ptrdiff_t>(g * per_group),
                                  p.begin() + static_cast<std::ptrdiff_t>((g + 1) * per_group));
    }
    std::vector<size_t> order(groups);
    std::iota(order.begin(), order.end(), size_t{0});
    const auto kept_groups = static_cast<std::ptrdiff_t>(routing.topk_groups);
    std::partial_sort(
        order.begin(), order.begin() + kept_groups, order.end(),
        [&](size_t a, size_t b) { return best[a] > best[b] || (best[a] == best[b] && a < b); });
    std::vector<bool> kept(groups, false);
    for (std::ptrdiff_t i = 0; i < kept_groups; ++i) kept[order[static_cast<size_t>(i)]] = true;
    for (size_t x = 0; x < e; ++x) {
      if (!kept[x / per_group]) competing[x] = 0.0f;
    }
  }
  std::vector<int32_t> order(e);
  std::iota(order.begin(), order.end(), 0);
  // Descending score, the lower id first on ties; only the first top_k are ordered.
  std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
    const float pa = competing[static_cast<size_t>(a)], pb = competing[static_cast<size_t>(b)];
    return pa > pb || (pa == pb && a < b);
  });
  float kept = 0.0f;
  for (int j = 0; j < top_k; ++j) {
    kept += competing[static_cast<size_t>(order[static_cast<size_t>(j)])];
  }
  for (int j = 0; j < top_k; ++j) {
    const int32_t id = order[static_cast<size_t>(j)];
    const float w = competing[static_cast<size_t>(id)];
    ids[j] = id;
    weights[j] = (routing.renormalize ? w / kept : w) * routing.scale;
  }
}

void route_token(const float* logits, int num_experts, int top_k, bool renormalize, int32_t* ids,
                 float* weights) {
  MoeRouting routing;
  routing.renormalize = renormalize;
  route_token_grouped(logits, num_experts, top_k, routing, ids, weights);
}

}  // namespace cpu

void CpuBackend::moe_route(const Tensor& router_logits, bool renormalize, Tensor expert_ids,
                           Tensor expert_weights, Tensor expert_tokens) {
  MoeRouting routing;
  routing.renormalize = renormalize;
  moe_route_grouped(router_logits, routing, expert_ids, expert_weights, expert_tokens);
}

void CpuBackend::moe_route_grouped(const Tensor& router_logits, const MoeRouting& routing,
                                   Tensor expert_ids, Tensor expert_weights, Tensor expert_tokens) {
  const int64_t t = router_logits.rows();
  const int64_t e = router_logits.row_size();
  const int64_t width = expert_ids.row_size(), k = width - routing.always_on;
  IB_ASSERT(router_logits.dtype == DType::kF32 && expert_ids.dtype == DType::kI32 &&
                expert_weights.dtype == DType::kF32 && expert_tokens.dtype == DType::kI64,
            "moe_route: logits f32, ids int32, weights f32, counts int64");
  IB_ASSERT(expert_ids.rows() == t && expert_weights.rows() == t &&
                expert_weights.row_size() == width && routing.always_on >= 0 && k >= 1 && k <= e &&
                expert_tokens.numel() == e,
            "moe_route: logits (T, E), ids and weights (T, k + always_on), k <= E, counts (E)");
  IB_ASSERT(routing.num_groups <= 1 || (e % routing.num_groups == 0 && routing.topk_groups >= 1 &&
                                        routing.topk_groups <= routing.num_groups &&
                                        routing.topk_groups * (e / routing.num_groups) >= k),
            "moe_route_grouped: groups must divide E and the groups kept hold k experts");
  auto* counts = expert_tokens.as<int64_t>();
  for (int64_t i = 0; i < t; ++i) {
    int32_t* ids = expert_ids.as<int32_t>() + i * width;
    float* weights = expert_weights.as<float>() + i * width;
    cpu::route_token_grouped(router_logits.as<const float>() + i * e, static_cast<int>(e),
                             static_cast<int>(k), routing, ids, weights);
    for (int64_t j = 0; j < k; ++j) ++counts[ids[j]];
    for (int64_t j = k; j < width; ++j) {  // the always-on experts
      ids[j] = static_cast<int32_t>(e + j - k);
      weights[j] = 1.0f;
    }
  }
}

// The reference of the fused combine (enable_fused_decode_reference): the experts' sum, then the
// residual add and the norm, as two ops.
void CpuBackend::moe_experts_add_rms_norm(const Tensor& x, const Tensor& expert_ids,
                                          const Tensor& expert_weights,
                                          std::span<const WeightRef> gate_up,
                                          std::span<const WeightRef> down, Tensor residual,
                                          const Tensor& norm_weight, float eps, Tensor normed) {
  IB_ASSERT(fused_reference_ != nullptr,
            "moe_experts_add_rms_norm: the CPU runs it with the fused decode reference only");
  experts_out_.resize(static_cast<size_t>(residual.numel()));
  const Tensor sum(experts_out_.data(), DType::kF32, {residual.rows(), residual.row_size()});
  moe_experts(x, expert_ids, expert_weights, gate_up, down, sum);
  add_rms_norm(residual, sum, norm_weight, eps, normed);
}

void CpuBackend::moe_experts(const Tensor& x, const Tensor& expert_ids,
                             const Tensor& expert_weights, std::span<const WeightRef> gate_up,
                             std::span<const WeightRef> down, Tensor out) {
  const int64_t t = x.rows(), d = x.row_size(), k = expert_ids.row_size();
  const auto e = static_cast<int64_t>(gate_up.size());
  IB_ASSERT(x.dtype == DType::kF32 && out.dtype == DType::kF32, "moe_experts: x, out fp32");
  IB_ASSERT(e > 0 && down.size() == gate_up.size() && out.rows() == t && out.row_size() == d &&
                expert_ids.rows() == t && expert_weights.rows() == t &&
                expert_weights.row_size() == k,
            "moe_experts: x, out (T, D); ids, weights (T, k); one down per gate_up");
  const int64_t f = gate_up[0].rows() / 2;
  std::memset(out.data, 0, out.bytes());
  std::vector<float> rows, h(static_cast<size_t>(t * 2 * f)), act(static_cast<size_t>(t * f)),
      y(static_cast<size_t>(t * d));
  std::vector<int64_t> tokens;
  std::vector<float> scales;
  for (int64_t ex = 0; ex < e; ++ex) {
    tokens.clear();
    scales.clear();
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j = 0; j < k; ++j) {
        if (expert_ids.as<const int32_t>()[i * k + j] != ex) continue;
        tokens.push_back(i);
        scales.push_back(expert_weights.as<const float>()[i * k + j]);
      }
    }
    if (tokens.empty()) continue;
    const auto n = static_cast<int64_t>(tokens.size());
    rows.resize(static_cast<size_t>(n * d));
    for (int64_t r = 0; r < n; ++r) {
      std::memcpy(rows.data() + r * d, x.as<const float>() + tokens[static_cast<size_t>(r)] * d,
                  static_cast<size_t>(d) * sizeof(float));
    }
    const auto ue = static_cast<size_t>(ex);
    IB_ASSERT(gate_up[ue].rows() == 2 * f && gate_up[ue].cols() == d && down[ue].rows() == d &&
                  down[ue].cols() == f,
              "moe_experts: expert gate_up (2F, D), down (D, F)");
    const Tensor rows_t(rows.data(), DType::kF32, {n, d});  // (n, D)
    const Tensor h_t(h.data(), DType::kF32, {n, 2 * f});    // (n, 2F)
    const Tensor act_t(act.data(), DType::kF32, {n, f});    // (n, F)
    const Tensor y_t(y.data(), DType::kF32, {n, d});        // (n, D)
    matmul(rows_t, gate_up[ue], nullptr, h_t);
    silu_mul(h_t, act_t);
    matmul(act_t, down[ue], nullptr, y_t);
    for (int64_t r = 0; r < n; ++r) {
      float* o = out.as<float>() + tokens[static_cast<size_t>(r)] * d;
      const float s = scales[static_cast<size_t>(r)];
      for (int64_t c = 0; c < d; ++c) o[c] += y[static_cast<size_t>(r * d + c)] * s;
    }
  }
}

}  // namespace ib
