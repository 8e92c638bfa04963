// result.json's "routing" section (detail/routing_json.h).
#include "targets/detail/routing_json.h"

#include <algorithm>
#include <numeric>

namespace ib {

nlohmann::json routing_json(const EngineStats& s) {
  if (s.expert_tokens.empty() || s.num_experts <= 0) return nullptr;
  const auto e = static_cast<size_t>(s.num_experts);
  const size_t layers = s.expert_tokens.size() / e;
  nlohmann::json tokens = nlohmann::json::array();
  nlohmann::json imbalance = nlohmann::json::array();
  int64_t routed = 0;
  for (size_t l = 0; l < layers; ++l) {
    const auto first = s.expert_tokens.begin() + static_cast<std::ptrdiff_t>(l * e);
    const std::vector<int64_t> row(first, first + static_cast<std::ptrdiff_t>(e));
    tokens.push_back(row);
    const int64_t sum = std::accumulate(row.begin(), row.end(), int64_t{0});
    routed += sum;
    const double mean = static_cast<double>(sum) / static_cast<double>(e);
    if (mean > 0) {
      imbalance.push_back(static_cast<double>(*std::max_element(row.begin(), row.end())) / mean);
    } else {
      imbalance.push_back(nullptr);  // no tokens routed in this layer
    }
  }
  return nlohmann::json{
      {"num_layers", layers},
      {"num_experts", s.num_experts},
      {"experts_per_token", s.experts_per_token},
      {"scope", "every token the engine computed since it started (warm-ups, prefill and decode)"},
      {"tokens_routed", routed},
      {"tokens_per_layer_expert", tokens},
      {"load_imbalance_max_over_mean", imbalance}};
}

}  // namespace ib
