// Internal to targets/: a mixture-of-experts engine's routing telemetry as the "routing" section
// of result.json's engine description: the tokens routed to each layer x expert and each layer's
// load imbalance (max / mean of its experts' token counts; 1.0 is perfectly even, num_experts /
// experts_per_token means one expert group takes every token).
#pragma once

#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace ib {

// null for a dense model (no expert_tokens).
nlohmann::json routing_json(const EngineStats& stats);

}  // namespace ib
