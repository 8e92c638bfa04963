// The double-precision reference forward pass (test support; see detail/reference_model.h).
#include "engine/detail/reference_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace ib::testing {
namespace {

std::vector<float> to_host(Backend& backend, const Tensor& t, int64_t row_begin, int64_t rows) {
  if (t.empty()) return {};
  const Tensor part = t.rank == 1 ? t.reshaped({t.numel(), 1}).slice_rows(row_begin, rows)
                                  : t.slice_rows(row_begin, rows);
  std::vector<float> out(static_cast<size_t>(part.numel()));
  backend.copy_to_host(part, out.data());
  return out;
}

using Vec = std::vector<double>;

// out (n) = W (n, k) x (k) + bias.
Vec linear(const std::vector<float>& w, const Vec& x, const std::vector<float>& bias) {
  const size_t k = x.size();
  const size_t n = w.size() / k;
  Vec out(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    double acc = bias.empty() ? 0.0 : bias[i];
    for (size_t j = 0; j < k; ++j) acc += double{w[i * k + j]} * x[j];
    out[i] = acc;
  }
  return out;
}

// x / rms(x) * (gain_offset + w): gain_offset 1 for Gemma's (1 + w) gains, else 0.
Vec rms_norm(const Vec& x, const std::vector<float>& w, double eps, double gain_offset = 0) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv * (gain_offset + w[i]);
  return out;
}

// down(gelu_tanh(gate h) * up h), Gemma-2's MLP.
Vec geglu(const std::vector<float>& gate_w, const std::vector<float>& up_w,
          const std::vector<float>& down_w, const Vec& h) {
  const Vec gate = linear(gate_w, h, {});
  const Vec up = linear(up_w, h, {});
  Vec act(gate.size());
  const double k = std::sqrt(2.0 / std::numbers::pi);
  for (size_t i = 0; i < gate.size(); ++i) {
    const double x = gate[i];
    act[i] = 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x))) * up[i];
  }
  return linear(down_w, act, {});
}

// Inverse frequencies in double, HF's formulas (default, llama3, linear).
Vec inv_freq(const ModelConfig& c) {
  Vec f;
  for (int i = 0; i < c.head_dim; i += 2) {
    f.push_back(1.0 / std::pow(c.rope_theta, static_cast<double>(i) / c.head_dim));
  }
  const RopeScaling& s = c.rope_scaling;
  if (s.type == "linear") {
    for (double& x : f) x /= s.factor;
  } else if (s.type == "llama3") {
    const double old_len = s.original_max_position_embeddings;
    const double low_wavelen = old_len / s.low_freq_factor;
    const double high_wavelen = old_len / s.high_freq_factor;
    for (double& x : f) {
      const double wavelen = 2 * std::numbers::pi / x;
      if (wavelen < high_wavelen) continue;
      if (wavelen > low_wavelen) {
        x /= s.factor;
      } else {
        const double smooth =
            (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        x = (1 - smooth) * x / s.factor + smooth * x;
      }
    }
  }
  return f;
}

// pos: each rotary pair's position (head_dim / 2).
void rotate(double* head, int head_dim, const std::vector<int>& pos, const Vec& freq) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double a = pos[static_cast<size_t>(i)] * freq[static_cast<size_t>(i)];
    const double x1 = head[i], x2 = head[i + half];
    head[i] = x1 * std::cos(a) - x2 * std::sin(a);
    head[i + half] = x2 * std::cos(a) + x1 * std::sin(a);
  }
}

// down(silu(gate h) * up h).
Vec swiglu(const std::vector<float>& gate_w, const std::vector<float>& up_w,
           const std::vector<float>& down_w, const Vec& h) {
  const Vec gate = linear(gate_w, h, {});
  const Vec up = linear(up_w, h, {});
  Vec act(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) act[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
  return linear(down_w, act, {});
}

// Mixtral's sparse MLP: softmax over the router's logits, the top-k experts (ties: lower id),
// their probabilities renormalised, the weighted sum of their SwiGLU outputs. *margin becomes the
// smaller of itself and the relative gap at the top-k cut, (p_k - p_k+1) / p_k.
Vec moe_mlp(const ModelConfig& c, const HostLayer& l, const Vec& h, double* margin) {
  const Vec logits = linear(l.router, h, {});
  const double mx = *std::max_element(logits.begin(), logits.end());
  Vec p(logits.size());
  double sum = 0;
  for (size_t e = 0; e < p.size(); ++e) sum += (p[e] = std::exp(logits[e] - mx));
  std::vector<size_t> order(p.size());
  for (size_t e = 0; e < order.size(); ++e) order[e] = e;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  const auto k = static_cast<size_t>(c.moe.experts_per_token);
  if (k < order.size()) {
    *margin = std::min(*margin, (p[order[k - 1]] - p[order[k]]) / p[order[k - 1]]);
  }
  double kept = 0;
  for (size_t j = 0; j < k; ++j) kept += p[order[j]] / sum;
  Vec out(h.size(), 0.0);
  for (size_t j = 0; j < k; ++j) {
    const size_t e = order[j];
    const Vec y = swiglu(l.expert_gate[e], l.expert_up[e], l.expert_down[e], h);
    for (size_t i = 0; i < out.size(); ++i) out[i] += p[e] / sum / kept * y[i];
  }
  return out;
}

}  // namespace

HostWeights copy_weights_to_host(const ModelConfig& c, const ModelWeights& w, Backend& backend) {
  const int64_t q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim;
  const int64_t f = c.intermediate_size;
  HostWeights h;
  h.embed = to_host(backend, w.embed, 0, c.vocab_size);
  h.final_norm = to_host(backend, w.final_norm, 0, c.hidden_size);
  h.lm_head = to_host(backend, w.lm_head.data, 0, c.vocab_size);
  for (const LayerWeights& lw : w.layers) {
    HostLayer l;
    l.attn_norm = to_host(backend, lw.attn_norm, 0, c.hidden_size);
    l.q = to_host(backend, lw.wqkv.data, 0, q);
    l.k = to_host(backend, lw.wqkv.data, q, kv);
    l.v = to_host(backend, lw.wqkv.data, q + kv, kv);
    l.q_bias = to_host(backend, lw.bqkv, 0, q);
    l.k_bias = to_host(backend, lw.bqkv, q, kv);
    l.v_bias = to_host(backend, lw.bqkv, q + kv, kv);
    l.o = to_host(backend, lw.wo.data, 0, c.hidden_size);
    l.ffn_norm = to_host(backend, lw.ffn_norm, 0, c.hidden_size);
    l.post_attn_norm = to_host(backend, lw.post_attn_norm, 0, c.hidden_size);
    l.post_ffn_norm = to_host(backend, lw.post_ffn_norm, 0, c.hidden_size);
    l.gate = to_host(backend, lw.w_gate_up.data, 0, f);
    l.up = to_host(backend, lw.w_gate_up.data, f, f);
    l.down = to_host(backend, lw.w_down.data, 0, c.hidden_size);
    const int64_t fe = c.moe.expert_intermediate_size;
    l.router = to_host(backend, lw.router.data, 0, c.moe.num_experts);
    for (size_t e = 0; e < lw.expert_gate_up.size(); ++e) {
      l.expert_gate.push_back(to_host(backend, lw.expert_gate_up[e].data, 0, fe));
      l.expert_up.push_back(to_host(backend, lw.expert_gate_up[e].data, fe, fe));
      l.expert_down.push_back(to_host(backend, lw.expert_down[e].data, 0, c.hidden_size));
    }
    h.layers.push_back(std::move(l));
  }
  return h;
}

std::vector<std::vector<double>> reference_logits(const ModelConfig& c, const HostWeights& w,
                                                  const std::vector<int32_t>& tokens) {
  return reference_logits(c, w, tokens, {});
}

std::vector<std::vector<double>> reference_logits(
    const ModelConfig& c, const HostWeights& w, const std::vector<int32_t>& tokens,
    const std::vector<std::vector<double>>& input_embeds) {
  return reference_logits(c, w, tokens, input_embeds, {});
}

std::vector<std::vector<double>> reference_logits(
    const ModelConfig& c, const HostWeights& w, const std::vector<int32_t>& tokens,
    const std::vector<std::vector<double>>& input_embeds,
    const std::vector<int32_t>& mrope_positions, const BlockSparse& sparse,
    std::vector<double>* routing_margins) {
  const size_t n = tokens.size();
  if (routing_margins) routing_margins->assign(n, std::numeric_limits<double>::infinity());
  double unused_margin = 0;
  // Each token's position per rotary pair: its index, or (M-RoPE, as transformers'
  // apply_multimodal_rotary_pos_emb) row k of mrope_positions on section k's pairs.
  std::vector<std::vector<int>> pair_pos(n, std::vector<int>(static_cast<size_t>(c.head_dim / 2)));
  for (size_t t = 0; t < n; ++t) {
    size_t pair = 0;
    for (size_t k = 0; k < 3 && !mrope_positions.empty(); ++k) {
      for (int j = 0; j < c.mrope_section[k]; ++j) pair_pos[t][pair++] = mrope_positions[k * n + t];
    }
    for (; pair < pair_pos[t].size(); ++pair) pair_pos[t][pair] = static_cast<int>(t);
  }
  const auto d = static_cast<size_t>(c.hidden_size);
  const auto hd = static_cast<size_t>(c.head_dim);
  const int group = c.num_heads / c.num_kv_heads;
  const Vec freq = inv_freq(c);
  const bool gemma = c.family == "gemma2";
  const double g1 = gemma ? 1.0 : 0.0;  // the gains' offset
  const double embed_scale = gemma ? std::sqrt(static_cast<double>(d)) : 1.0;
  const double scale =
      1.0 / std::sqrt(c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : double(hd));
  const double cap = c.attn_logit_softcapping;
  std::vector<Vec> x(n, Vec(d));  // residual stream, (n, D)
  for (size_t t = 0; t < n; ++t) {
    for (size_t i = 0; i < d; ++i)
      x[t][i] = w.embed[static_cast<size_t>(tokens[t]) * d + i] * embed_scale;
    if (t < input_embeds.size() && !input_embeds[t].empty()) x[t] = input_embeds[t];
  }
  for (size_t layer = 0; layer < w.layers.size(); ++layer) {
    const HostLayer& l = w.layers[layer];
    // Gemma-2: odd layers attend globally.
    const size_t window =
        c.alternating_sliding_window && layer % 2 == 1 ? 0 : static_cast<size_t>(c.sliding_window);
    std::vector<Vec> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      const Vec h = rms_norm(x[t], l.attn_norm, c.rms_norm_eps, g1);
      q[t] = linear(l.q, h, l.q_bias);
      k[t] = linear(l.k, h, l.k_bias);
      v[t] = linear(l.v, h, l.v_bias);
      for (int head = 0; head < c.num_heads; ++head)
        rotate(&q[t][head * hd], c.head_dim, pair_pos[t], freq);
      for (int head = 0; head < c.num_kv_heads; ++head)
        rotate(&k[t][head * hd], c.head_dim, pair_pos[t], freq);
    }
    for (size_t t = 0; t < n; ++t) {
      Vec attn(static_cast<size_t>(c.num_heads) * hd, 0.0);
      const size_t first = window > 0 && t + 1 > window ? t + 1 - window : 0;
      for (int head = 0; head < c.num_heads; ++head) {
        const size_t g = static_cast<size_t>(head / group);
        Vec scores;
        for (size_t p = first; p <= t; ++p) {
          if (sparse.block_size > 0) {  // the local band of blocks, or a strided block
            const auto qb = static_cast<int>(t) / sparse.block_size;
            const auto kb = static_cast<int>(p) / sparse.block_size;
            if (qb - kb >= sparse.local_blocks && (kb + 1) % sparse.vert_stride != 0) {
              scores.push_back(-std::numeric_limits<double>::infinity());
              continue;
            }
          }
          double dot = 0;
          for (size_t i = 0; i < hd; ++i) dot += q[t][head * hd + i] * k[p][g * hd + i];
          const double s = dot * scale;
          scores.push_back(cap > 0 ? cap * std::tanh(s / cap) : s);
        }
        const double mx = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (double& s : scores) sum += (s = std::exp(s - mx));
        for (size_t p = first; p <= t; ++p) {
          for (size_t i = 0; i < hd; ++i)
            attn[head * hd + i] += scores[p - first] / sum * v[p][g * hd + i];
        }
      }
      Vec o = linear(l.o, attn, {});
      if (gemma) o = rms_norm(o, l.post_attn_norm, c.rms_norm_eps, g1);
      for (size_t i = 0; i < d; ++i) x[t][i] += o[i];
      const Vec h = rms_norm(x[t], l.ffn_norm, c.rms_norm_eps, g1);
      Vec down = gemma ? geglu(l.gate, l.up, l.down, h)
                 : l.router.empty()
                     ? swiglu(l.gate, l.up, l.down, h)
                     : moe_mlp(c, l, h, routing_margins ? &(*routing_margins)[t] : &unused_margin);
      if (gemma) down = rms_norm(down, l.post_ffn_norm, c.rms_norm_eps, g1);
      for (size_t i = 0; i < d; ++i) x[t][i] += down[i];
    }
  }
  std::vector<Vec> logits;
  const double final_cap = c.final_logit_softcapping;
  for (size_t t = 0; t < n; ++t) {
    Vec row = linear(w.lm_head, rms_norm(x[t], w.final_norm, c.rms_norm_eps, g1), {});
    if (final_cap > 0) {
      for (double& z : row) z = final_cap * std::tanh(z / final_cap);
    }
    logits.push_back(std::move(row));
  }
  return logits;
}

}  // namespace ib::testing
