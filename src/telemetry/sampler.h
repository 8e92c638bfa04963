// Sampler: one thread that samples every collector every interval on the one clock, from
// start() until stop(), into a Timeline; it measures its own cost (samples, time per sample,
// effective interval and jitter) so a result says how much the telemetry disturbed the run.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "telemetry/collector.h"
#include "telemetry/timeline.h"

namespace ib {

inline constexpr int kMinSampleIntervalMs = 1;
inline constexpr int kMaxSampleIntervalMs = 60'000;
// A user error for an interval outside [1 ms, 60 s].
Status validate_sample_interval_ms(int interval_ms);

// What the sampler cost and how regular it was.
struct SamplerOverhead {
  int64_t samples = 0;
  double mean_sample_latency_us = 0;  // one tick: every collector's sample() + append_values()
  double max_sample_latency_us = 0;
  double effective_interval_ms = 0;  // mean gap between ticks
  double interval_jitter_ms = 0;     // population std of the gaps
};
SamplerOverhead sampler_overhead(const std::vector<int64_t>& tick_ns,
                                 const std::vector<int64_t>& latency_ns);

class Sampler {
 public:
  Sampler(std::vector<std::unique_ptr<Collector>> collectors, int interval_ms);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Starts every collector (errors returned, nothing started) and the sampling thread.
  Status start(int64_t origin_ns);
  // Takes a last sample, stops the collectors and joins the thread. Idempotent.
  void stop();
  // {"sample_interval_ms": .., "sampler": overhead, "<collector>": summary, ...}; after stop().
  nlohmann::json summary() const;
  // Every sample, times relative to the origin; after stop().
  const Timeline& timeline() const { return timeline_; }

 private:
  void loop();
  void tick(int64_t t_ns);

  std::vector<std::unique_ptr<Collector>> collectors_;
  int interval_ms_;
  int64_t origin_ns_ = 0;
  Timeline timeline_;                // written by the sampling thread only while it runs
  std::vector<int64_t> latency_ns_;  // (samples): cost of each tick
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_requested_ = false;
  bool running_ = false;
};

}  // namespace ib
