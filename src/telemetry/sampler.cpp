#include "telemetry/sampler.h"

#include <algorithm>
#include <chrono>

#include "core/clock.h"

namespace ib {

Sampler::Sampler(std::vector<std::unique_ptr<Collector>> collectors, int interval_ms)
    : collectors_(std::move(collectors)), interval_ms_(interval_ms > 0 ? interval_ms : 100) {}

Sampler::~Sampler() {
  stop();
}

Status Sampler::start(int64_t origin_ns) {
  IB_ASSERT(!running_, "Sampler::start called twice");
  for (auto& c : collectors_) IB_TRY(c->start(origin_ns));
  for (auto& c : collectors_) c->sample(now_ns());
  running_ = true;
  thread_ = std::thread([this] { loop(); });
  return Ok{};
}

void Sampler::loop() {
  auto next = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  for (;;) {
    next = std::max(next + std::chrono::milliseconds(interval_ms_),
                    std::chrono::steady_clock::now());  // no catch-up burst after a slow sample
    if (cv_.wait_until(lock, next, [&] { return stop_requested_; })) return;
    lock.unlock();
    const int64_t t = now_ns();
    for (auto& c : collectors_) c->sample(t);
    lock.lock();
  }
}

void Sampler::stop() {
  if (!running_) return;
  {
    std::lock_guard lock(mu_);
    stop_requested_ = true;
  }
  cv_.notify_all();
  thread_.join();
  const int64_t t = now_ns();
  for (auto& c : collectors_) c->stop(t);
  running_ = false;
}

nlohmann::json Sampler::summary() const {
  nlohmann::json j{{"sample_interval_ms", interval_ms_}};
  for (const auto& c : collectors_) j[c->name()] = c->summary();
  return j;
}

}  // namespace ib
