#include "targets/detail/profile_json.h"

namespace ib {
namespace {

using nlohmann::json;

double ratio(double num, double den) {
  return den > 0 ? num / den : 0.0;
}

json class_json(const StepClassProfile& c, double ceiling) {
  const double wall_s = static_cast<double>(c.wall_ns) * 1e-9;
  const double device_s = static_cast<double>(c.device_ns) * 1e-9;
  const double achieved = ratio(static_cast<double>(c.bytes), wall_s);
  // Device-side bandwidth over the timed steps only (all steps on a backend with a timer).
  const double device_bytes = c.timed_steps == c.steps ? static_cast<double>(c.bytes) : 0.0;
  return json{
      {"steps", c.steps},
      {"tokens", c.tokens},
      {"bytes", c.bytes},
      {"wall_s", wall_s},
      {"device_s", device_s},
      {"timed_steps", c.timed_steps},
      {"graph_steps", c.graph_steps},
      {"tokens_per_s", ratio(static_cast<double>(c.tokens), wall_s)},
      {"median_step_ms", c.median_step_ns * 1e-6},
      {"p95_step_ms", c.p95_step_ns * 1e-6},
      {"median_device_ms", c.median_device_ns * 1e-6},
      {"median_host_overhead_fraction", c.median_host_fraction},
      {"median_host_phases_us",
       {{"schedule", c.median_schedule_ns * 1e-3},
        {"launch", c.median_launch_ns * 1e-3},
        {"wait", c.median_wait_ns * 1e-3},
        {"finish", c.median_finish_ns * 1e-3},
        {"between_steps", c.median_between_steps_ns * 1e-3}}},
      {"achieved_bytes_per_s", achieved},
      {"achieved_device_bytes_per_s", ratio(device_bytes, device_s)},
      {"fraction_of_copy_ceiling", ratio(achieved, ceiling)},
      {"fraction_of_reference_copy", ratio(achieved, kReferenceCopyBytesPerS)},
  };
}

}  // namespace

json profile_json(const EngineProfile& p) {
  return json{
      {"definition",
       "per step: bytes = weights streamed (all layers, of a mixture-of-experts layer only the "
       "experts the step's tokens were routed to; lm_head and final norm when a row "
       "samples, the embedding rows used) + KV read (each sequence's visible context) + KV "
       "written; achieved = bytes / step wall time; device time from events around the forward "
       "pass; host overhead = (wall - device) / wall; sums over every step since the engine "
       "started (warm-up included; calibration's steps, which come before, are not); host phases "
       "(medians, us): schedule = scheduling and building the batch, launch = enqueueing the "
       "device work (metadata upload, graph launch), wait = until the results are on the host, "
       "finish = token bookkeeping, between_steps = the engine loop from one step's end to the "
       "next one's start (events delivered, arrivals admitted)"},
      {"copy_ceiling_bytes_per_s", p.copy_ceiling_bytes_per_s},
      {"reference_copy_bytes_per_s", kReferenceCopyBytesPerS},
      {"graphs", {{"count", p.num_graphs}, {"buckets", p.graph_buckets}, {"bytes", p.graph_bytes}}},
      {"decode", class_json(p.decode, p.copy_ceiling_bytes_per_s)},
      {"prefill", class_json(p.prefill, p.copy_ceiling_bytes_per_s)},
  };
}

}  // namespace ib
