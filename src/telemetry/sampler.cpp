#include "telemetry/sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "core/clock.h"

namespace ib {

Status validate_sample_interval_ms(int interval_ms) {
  if (interval_ms < kMinSampleIntervalMs || interval_ms > kMaxSampleIntervalMs) {
    return user_error(fmt::format(
        "--memory-sample-interval {} ms is outside [{} ms, {} ms]; 100 is the default, 10 is "
        "fine for short runs",
        interval_ms, kMinSampleIntervalMs, kMaxSampleIntervalMs));
  }
  return Ok{};
}

SamplerOverhead sampler_overhead(const std::vector<int64_t>& tick_ns,
                                 const std::vector<int64_t>& latency_ns) {
  SamplerOverhead o;
  o.samples = static_cast<int64_t>(tick_ns.size());
  if (!latency_ns.empty()) {
    double sum = 0;
    for (int64_t l : latency_ns) {
      sum += static_cast<double>(l);
      o.max_sample_latency_us = std::max(o.max_sample_latency_us, static_cast<double>(l) / 1e3);
    }
    o.mean_sample_latency_us = sum / static_cast<double>(latency_ns.size()) / 1e3;
  }
  if (tick_ns.size() >= 2) {
    std::vector<double> gaps_ms;
    for (size_t i = 1; i < tick_ns.size(); ++i) {
      gaps_ms.push_back(static_cast<double>(tick_ns[i] - tick_ns[i - 1]) / 1e6);
    }
    double mean = 0;
    for (double g : gaps_ms) mean += g;
    mean /= static_cast<double>(gaps_ms.size());
    double var = 0;
    for (double g : gaps_ms) var += (g - mean) * (g - mean);
    o.effective_interval_ms = mean;
    o.interval_jitter_ms = std::sqrt(var / static_cast<double>(gaps_ms.size()));
  }
  return o;
}

Sampler::Sampler(std::vector<std::unique_ptr<Collector>> collectors, int interval_ms)
    : collectors_(std::move(collectors)), interval_ms_(interval_ms > 0 ? interval_ms : 100) {}

Sampler::~Sampler() {
  stop();
}

Status Sampler::start(int64_t origin_ns) {
  IB_ASSERT(!running_, "Sampler::start called twice");
  origin_ns_ = origin_ns;
  for (auto& c : collectors_) IB_TRY(c->start(origin_ns));
  timeline_ = Timeline{};
  for (const auto& c : collectors_) {
    for (auto& name : c->columns()) timeline_.columns.push_back(std::move(name));
  }
  tick(now_ns());
  running_ = true;
  thread_ = std::thread([this] { loop(); });
  return Ok{};
}

void Sampler::tick(int64_t t_ns) {
  for (auto& c : collectors_) c->sample(t_ns);
  std::vector<double> row;
  row.reserve(timeline_.columns.size());
  for (const auto& c : collectors_) c->append_values(row);
  IB_ASSERT(row.size() == timeline_.columns.size(), "a collector appended the wrong value count");
  timeline_.time_ns.push_back(t_ns - origin_ns_);
  timeline_.rows.push_back(std::move(row));
  latency_ns_.push_back(now_ns() - t_ns);
}

void Sampler::loop() {
  auto next = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  for (;;) {
    next = std::max(next + std::chrono::milliseconds(interval_ms_),
                    std::chrono::steady_clock::now());  // no catch-up burst after a slow sample
    if (cv_.wait_until(lock, next, [&] { return stop_requested_; })) return;
    lock.unlock();
    tick(now_ns());
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
  tick(now_ns());
  const int64_t t = now_ns();
  for (auto& c : collectors_) c->stop(t);
  running_ = false;
}

nlohmann::json Sampler::summary() const {
  std::vector<int64_t> ticks;
  for (int64_t t : timeline_.time_ns) ticks.push_back(t);
  const SamplerOverhead o = sampler_overhead(ticks, latency_ns_);
  nlohmann::json j{{"sample_interval_ms", interval_ms_},
                   {"sampler",
                    {{"samples", o.samples},
                     {"mean_sample_latency_us", o.mean_sample_latency_us},
                     {"max_sample_latency_us", o.max_sample_latency_us},
                     {"effective_interval_ms", o.effective_interval_ms},
                     {"interval_jitter_ms", o.interval_jitter_ms}}}};
  for (const auto& c : collectors_) j[c->name()] = c->summary();
  return j;
}

}  // namespace ib
