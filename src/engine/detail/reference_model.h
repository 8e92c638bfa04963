// Test support (compiled into engine tests only): a naive single-sequence Llama forward pass in
// double precision over contiguous K/V (with Mixtral's routed experts where the layers hold them,
// and Gemma-2's scaled embeddings, (1 + w) gains, sandwich norms, GeGLU, soft-capping and
// alternating local/global layers for family "gemma2"),
// written independently of the engine and the backend ops, to check the paged, batched engine
// against.
#pragma once

#include <vector>

#include "engine/model_weights.h"

namespace ib::testing {

// Host copies of the engine's weights, unfused as HF stores them.
struct HostLayer {
  std::vector<float> attn_norm, q, k, v, q_bias, k_bias, v_bias, o, ffn_norm, gate, up, down;
  std::vector<float> post_attn_norm, post_ffn_norm;  // Gemma-2 only
  // Mixture-of-experts layers (gate, up, down empty): router (E, D), per expert w1 (gate),
  // w3 (up), w2 (down).
  std::vector<float> router;
  std::vector<std::vector<float>> expert_gate, expert_up, expert_down;
};
struct HostWeights {
  std::vector<float> embed, final_norm, lm_head;
  std::vector<HostLayer> layers;
};

HostWeights copy_weights_to_host(const ModelConfig& config, const ModelWeights& weights,
                                 Backend& backend);

// Logits (num_tokens, vocab) after every position of tokens, causal attention from position 0.
std::vector<std::vector<double>> reference_logits(const ModelConfig& config, const HostWeights& w,
                                                  const std::vector<int32_t>& tokens);
// The same with position t's embedding replaced by input_embeds[t] where that row is non-empty
// (a vision encoder's output, (D) each).
std::vector<std::vector<double>> reference_logits(
    const ModelConfig& config, const HostWeights& w, const std::vector<int32_t>& tokens,
    const std::vector<std::vector<double>>& input_embeds);
// The same with multimodal RoPE (config.mrope_section): mrope_positions (3, num_tokens) row-major,
// each token's temporal, height and width positions; empty: sequential. With sparse enabled,
// every layer's attention keeps the local + strided block-sparse pattern (backend/block_sparse.h,
// spelled out again here from its definition). With routing_margins, each position's smallest
// relative router gap at the top-k cut over the mixture-of-experts layers,
// (p_k - p_k+1) / p_k (infinity without such layers): where it is tiny, a low-precision run may
// route to another expert there.
std::vector<std::vector<double>> reference_logits(
    const ModelConfig& config, const HostWeights& w, const std::vector<int32_t>& tokens,
    const std::vector<std::vector<double>>& input_embeds,
    const std::vector<int32_t>& mrope_positions, const BlockSparse& sparse = {},
    std::vector<double>* routing_margins = nullptr);

}  // namespace ib::testing
