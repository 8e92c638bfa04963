// A mixture-of-experts run's routing as a picture: expert_load.svg, one row per layer and one
// column per expert, each cell coloured by the expert's share of its layer's tokens relative to
// an even share (result.json's engine.routing, targets/detail/routing_json.h).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace ib {

inline constexpr const char* kExpertLoadSvg = "expert_load.svg";

// routing: engine.routing ({"tokens_per_layer_expert": [[...]], "experts_per_token", ...}).
// Colour: load / mean load of the layer on a viridis scale from 0 to the largest ratio; the cell
// tooltip gives the token count and the ratio. Empty string when routing holds no counts.
std::string expert_load_svg(const nlohmann::json& routing, const std::string& title);

}  // namespace ib
