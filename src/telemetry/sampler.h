// Sampler: one thread that samples every collector every interval on the one clock, from
// start() until stop().
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "telemetry/collector.h"

namespace ib {

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
  // {"sample_interval_ms": .., "<collector>": summary, ...}; call after stop().
  nlohmann::json summary() const;

 private:
  void loop();

  std::vector<std::unique_ptr<Collector>> collectors_;
  int interval_ms_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_requested_ = false;
  bool running_ = false;
};

}  // namespace ib
