// The routing section of result.json: counts by layer x expert and max / mean per layer.
#include "targets/detail/routing_json.h"

#include <gtest/gtest.h>

namespace ib {
namespace {

TEST(RoutingJson, NullForDenseModels) {
  EXPECT_TRUE(routing_json(EngineStats{}).is_null());
}

TEST(RoutingJson, CountsAndImbalancePerLayer) {
  EngineStats s;
  s.num_experts = 4;
  s.experts_per_token = 2;
  s.expert_tokens = {2, 2, 2, 2,   // even: imbalance 1
                     8, 0, 0, 0,   // one expert: 8 / 2 = 4
                     0, 0, 0, 0};  // no tokens: null
  const auto j = routing_json(s);
  EXPECT_EQ(j["num_layers"], 3);
  EXPECT_EQ(j["num_experts"], 4);
  EXPECT_EQ(j["experts_per_token"], 2);
  EXPECT_EQ(j["tokens_routed"], 16);
  EXPECT_EQ(j["tokens_per_layer_expert"][1], nlohmann::json({8, 0, 0, 0}));
  EXPECT_DOUBLE_EQ(j["load_imbalance_max_over_mean"][0].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["load_imbalance_max_over_mean"][1].get<double>(), 4.0);
  EXPECT_TRUE(j["load_imbalance_max_over_mean"][2].is_null());
}

}  // namespace
}  // namespace ib
