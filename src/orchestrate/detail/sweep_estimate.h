// Internal to orchestrate/: the sweep grid's duration estimate.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrate/orchestrate.h"

namespace ib::detail {

// {"method", "load_s", "prefill_s_per_token", "decode_step_floor_s", "estimated_s"}: one
// calibration probe on a backend of the cells' options, then a roofline per cell.
Result<nlohmann::json> estimate_grid_s(const std::vector<SweepCell>& cells,
                                       const std::vector<int>& lens, int output_len);

}  // namespace ib::detail
