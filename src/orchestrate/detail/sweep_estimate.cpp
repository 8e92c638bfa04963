// The sweep's duration estimate: a calibrated roofline.
#include "orchestrate/detail/sweep_estimate.h"
#include "backend/backend_factory.h"

#include <algorithm>
#include <cmath>

#include "orchestrate/detail/sweep_probe.h"

namespace ib::detail {

using nlohmann::json;

// Calibrated roofline: one probe (batch 1 at the longest input, 4 steps) gives the load time,
// the per-token prefill cost (compute) and the batch-1 decode step (the memory floor); a cell
// costs load + its batches x (B x L prefill tokens + output_len decode steps, each the larger of
// the floor and B tokens of compute).
Result<json> estimate_grid_s(const std::vector<SweepCell>& cells, const std::vector<int>& lens,
                             int output_len) {
  const NativeTargetOptions& n = cells.front().plan.target.native;
  IB_ASSIGN_OR_RETURN(auto backend, create_backend(n.backend));
  ProbeSpec spec;
  spec.model = n.model;
  spec.weights = n.weights;
  spec.engine = n.engine;
  spec.engine.use_graphs = false;
  spec.engine.max_num_seqs = 1;
  spec.engine.kv_growth = KvGrowth::kPreallocated;
  spec.input_len =
      std::min(*std::max_element(lens.begin(), lens.end()), n.model.max_position_embeddings - 8);
  spec.engine.max_model_len = spec.input_len + 4;
  spec.engine.cpu_kv_cache_bytes = int64_t{1} << 30;
  spec.steps = 4;
  spec.stop_at_preemption = false;
  IB_ASSIGN_OR_RETURN(const ProbeResult p, run_probe(*backend, spec));
  if (!p.message.empty() || p.steps == 0) {
    return runtime_error("the calibration probe failed: " + p.message);
  }
  const double per_token_s = p.prefill_s / spec.input_len;
  const double floor_s = p.decode_step_s > 0 ? p.decode_step_s : per_token_s;
  double total_s = 0;
  for (const SweepCell& c : cells) {
    const RunnerOptions& r = c.plan.runner;
    const int prompts = c.plan.workload.num_prompts;
    const double batches = std::ceil(static_cast<double>(prompts) / c.batch);
    const double warm_batches = std::ceil(static_cast<double>(r.num_warmups) / c.batch);
    const double batch_s = c.batch * static_cast<double>(c.input_len) * per_token_s +
                           output_len * std::max(floor_s, c.batch * per_token_s);
    total_s += p.load_s + (warm_batches + r.runs * batches) * batch_s;
  }
  return json{{"method", "calibrated roofline (probe: batch 1, input " +
                             std::to_string(spec.input_len) + ", 4 steps)"},
              {"load_s", p.load_s},
              {"prefill_s_per_token", per_token_s},
              {"decode_step_floor_s", floor_s},
              {"estimated_s", total_s}};
}

}  // namespace ib::detail
