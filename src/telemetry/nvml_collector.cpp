// The "nvml" collector: per-GPU memory (v2 used/reserved/free/total and v1 used), this
// process's memory where NVML shows it, power, the energy counter, clocks, utilisation and
// temperature, every sample; the process list (the slowest call) at most once a second.
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "core/clock.h"
#include "telemetry/collector.h"
#include "telemetry/detail/nvml.h"

namespace ib {
namespace {

using nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kProcessPollNs = 1'000'000'000;

constexpr const char* kFields[] = {
    "used_bytes",         "reserved_bytes",  "free_bytes",   "total_bytes",  "v1_used_bytes",
    "process_used_bytes", "power_w",         "energy_j",     "sm_clock_mhz", "mem_clock_mhz",
    "util_gpu_pct",       "util_memory_pct", "temperature_c"};
constexpr size_t kNumFields = std::size(kFields);

std::array<double, kNumFields> as_array(const detail::NvmlReading& r) {
  return {r.used_bytes,         r.reserved_bytes,  r.free_bytes,   r.total_bytes,  r.v1_used_bytes,
          r.process_used_bytes, r.power_w,         r.energy_j,     r.sm_clock_mhz, r.mem_clock_mhz,
          r.util_gpu_pct,       r.util_memory_pct, r.temperature_c};
}

class NvmlCollector : public Collector {
 public:
  explicit NvmlCollector(CollectorContext context) : context_(std::move(context)) {}
  std::string name() const override { return "nvml"; }

  Status start(int64_t) override {
    api_ = detail::NvmlApi::open(context_.nvml_library, &reason_);
    if (!api_ || api_->device_count() == 0) {
      if (api_) reason_ = "NVML sees no GPU";
      api_.reset();
      const std::string line = "inferbench: GPU telemetry off: " + reason_;
      if (context_.notice) {
        context_.notice(line);
      } else {
        std::fprintf(stderr, "%s\n", line.c_str());
      }
      return Ok{};
    }
    const auto n = static_cast<size_t>(api_->device_count());
    last_.assign(n, {});
    energy_origin_j_.assign(n, kNaN);
    peaks_.assign(n, {});
    for (auto& p : peaks_) p.fill(kNaN);
    return Ok{};
  }

  void sample(int64_t now_ns) override {
    if (!api_) return;
    const bool processes = now_ns - last_process_poll_ns_ >= kProcessPollNs;
    if (processes) last_process_poll_ns_ = now_ns;
    for (int i = 0; i < api_->device_count(); ++i) {
      const int64_t t0 = ib::now_ns();
      detail::NvmlReading r = api_->read(i, processes);
      call_ns_ += ib::now_ns() - t0;
      ++calls_;
      const auto gi = static_cast<size_t>(i);
      if (!processes) r.process_used_bytes = last_[gi][5];
      if (std::isnan(energy_origin_j_[gi])) energy_origin_j_[gi] = r.energy_j;
      r.energy_j -= energy_origin_j_[gi];
      last_[gi] = as_array(r);
      for (size_t k = 0; k < kNumFields; ++k) {
        const double v = last_[gi][k];
        if (std::isfinite(v) && !(v <= peaks_[gi][k])) peaks_[gi][k] = v;
      }
    }
    ++samples_;
  }

  void stop(int64_t) override {}

  json summary() const override {
    if (!api_) return json{{"available", false}, {"reason", reason_}};
    json gpus = json::array();
    auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
    for (int i = 0; i < api_->device_count(); ++i) {
      const auto& p = peaks_[static_cast<size_t>(i)];
      gpus.push_back(json{{"index", i},
                          {"name", api_->device_name(i)},
                          {"used_peak_bytes", num(p[0])},
                          {"reserved_bytes", num(p[1])},
                          {"total_bytes", num(p[3])},
                          {"v1_used_peak_bytes", num(p[4])},
                          {"process_used_peak_bytes", num(p[5])},
                          {"power_peak_w", num(p[6])},
                          {"energy_j", num(last_[static_cast<size_t>(i)][7])},
                          {"sm_clock_peak_mhz", num(p[8])},
                          {"temperature_peak_c", num(p[12])}});
    }
    return json{
        {"available", true},
        {"library", context_.nvml_library},
        {"api", api_->describe()},
        {"samples", samples_},
        {"mean_call_latency_us",
         calls_ > 0 ? static_cast<double>(call_ns_) / static_cast<double>(calls_) / 1e3 : 0.0},
        {"gpus", gpus}};
  }

  std::vector<std::string> columns() const override {
    std::vector<std::string> out;
    if (!api_) return out;
    for (int i = 0; i < api_->device_count(); ++i) {
      for (const char* f : kFields) out.push_back(fmt::format("gpu{}_{}", i, f));
    }
    return out;
  }

  void append_values(std::vector<double>& row) const override {
    for (const auto& values : last_) row.insert(row.end(), values.begin(), values.end());
  }

 private:
  CollectorContext context_;
  std::unique_ptr<detail::NvmlApi> api_;
  std::string reason_;
  std::vector<std::array<double, kNumFields>> last_;   // (gpus, fields)
  std::vector<std::array<double, kNumFields>> peaks_;  // (gpus, fields)
  std::vector<double> energy_origin_j_;                // (gpus): the counter at the first sample
  int64_t last_process_poll_ns_ = std::numeric_limits<int64_t>::min() / 2;
  int64_t samples_ = 0;
  int64_t calls_ = 0;
  int64_t call_ns_ = 0;
};

}  // namespace

std::string nvml_library_path() {
  const char* path = std::getenv("INFERBENCH_NVML_LIBRARY");
  return path != nullptr && *path != 0 ? path : "libnvidia-ml.so.1";
}

std::unique_ptr<Collector> make_nvml_collector(const CollectorContext& context) {
  return std::make_unique<NvmlCollector>(context);
}

}  // namespace ib
