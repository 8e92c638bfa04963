// The "rss" and "engine-pools" collectors.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "core/fs.h"
#include "telemetry/collector.h"

namespace ib {
namespace {

using nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

class RssCollector : public Collector {
 public:
  std::string name() const override { return "rss"; }
  Status start(int64_t) override {
    page_bytes_ = ::sysconf(_SC_PAGESIZE);
    if (!read_rss()) return runtime_error("cannot read /proc/self/statm for the rss collector");
    start_rss_bytes_ = peak_rss_bytes_;
    return Ok{};
  }
  void sample(int64_t) override { read_rss(); }
  void stop(int64_t) override {
    read_rss();
    auto status = read_file("/proc/self/status");
    if (status.ok()) vm_hwm_bytes_ = parse_status_kb_field(*status, "VmHWM:");
  }
  json summary() const override {
    return json{{"peak_rss_bytes", peak_rss_bytes_},
                {"start_rss_bytes", start_rss_bytes_},
                {"vm_hwm_bytes", vm_hwm_bytes_ ? json(*vm_hwm_bytes_) : json(nullptr)},
                {"samples", samples_}};
  }
  std::vector<std::string> columns() const override { return {"rss_bytes"}; }
  void append_values(std::vector<double>& row) const override {
    row.push_back(last_ok_ ? static_cast<double>(last_rss_bytes_) : kNaN);
  }

 private:
  bool read_rss() {
    last_ok_ = false;
    auto statm = read_file("/proc/self/statm");
    if (!statm.ok()) return false;
    const auto rss = parse_statm_resident_bytes(*statm, page_bytes_);
    if (!rss) return false;
    last_ok_ = true;
    last_rss_bytes_ = *rss;
    peak_rss_bytes_ = std::max(peak_rss_bytes_, *rss);
    ++samples_;
    return true;
  }
  int64_t page_bytes_ = 4096;
  bool last_ok_ = false;
  int64_t last_rss_bytes_ = 0;
  int64_t peak_rss_bytes_ = 0;
  int64_t start_rss_bytes_ = 0;
  std::optional<int64_t> vm_hwm_bytes_;
  int64_t samples_ = 0;
};

class EnginePoolsCollector : public Collector {
 public:
  explicit EnginePoolsCollector(CollectorContext context) : context_(std::move(context)) {}
  std::string name() const override { return "engine-pools"; }
  Status start(int64_t) override { return Ok{}; }
  void sample(int64_t) override {
    has_last_ = false;
    if (!context_.target_memory) return;
    const auto m = context_.target_memory();
    if (!m) return;
    ++samples_;
    has_last_ = true;
    last_ = *m;
    kv_used_peak_bytes_ = std::max({kv_used_peak_bytes_, m->kv_used_bytes, m->kv_peak_used_bytes});
    activations_peak_bytes_ = std::max(activations_peak_bytes_, m->activations_bytes);
    allocated_peak_bytes_ =
        std::max({allocated_peak_bytes_, m->allocated_bytes, m->peak_allocated_bytes});
  }
  void stop(int64_t now_ns) override { sample(now_ns); }
  json summary() const override {
    if (samples_ == 0) return json{{"available", false}};
    return json{{"available", true},
                {"weights_bytes", last_.weights_bytes},
                {"kv_pool_bytes", last_.kv_pool_bytes},
                {"kv_used_peak_bytes", kv_used_peak_bytes_},
                {"activations_peak_bytes", activations_peak_bytes_},
                {"allocated_peak_bytes", allocated_peak_bytes_},
                {"samples", samples_}};
  }
  std::vector<std::string> columns() const override {
    std::vector<std::string> out = {"engine_allocated_bytes", "weights_bytes",     "kv_pool_bytes",
                                    "kv_used_bytes",          "activations_bytes", "graph_bytes"};
    for (int r = 0; r < ranks(); ++r) out.push_back(fmt::format("rank{}_demand_bytes", r));
    return out;
  }
  void append_values(std::vector<double>& row) const override {
    for (int64_t v : {last_.allocated_bytes, last_.weights_bytes, last_.kv_pool_bytes,
                      last_.kv_used_bytes, last_.activations_bytes, last_.graph_bytes}) {
      row.push_back(has_last_ ? static_cast<double>(v) : kNaN);
    }
    for (int r = 0; r < ranks(); ++r) {
      const auto i = static_cast<size_t>(r);
      const bool known = has_last_ && i < last_.rank_demand_bytes.size();
      row.push_back(known ? static_cast<double>(last_.rank_demand_bytes[i]) : kNaN);
    }
  }

 private:
  int ranks() const {
    return context_.tensor_parallel_ranks > 1 ? context_.tensor_parallel_ranks : 0;
  }

  CollectorContext context_;
  bool has_last_ = false;
  TargetMemory last_;
  int64_t kv_used_peak_bytes_ = 0;
  int64_t activations_peak_bytes_ = 0;
  int64_t allocated_peak_bytes_ = 0;
  int64_t samples_ = 0;
};

}  // namespace

std::optional<int64_t> parse_statm_resident_bytes(const std::string& statm, int64_t page_bytes) {
  std::istringstream in(statm);
  int64_t size_pages = 0;
  int64_t resident_pages = 0;
  if (!(in >> size_pages >> resident_pages) || resident_pages < 0) return std::nullopt;
  return resident_pages * page_bytes;
}

std::optional<int64_t> parse_status_kb_field(const std::string& status, const std::string& field) {
  std::istringstream in(status);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) != 0) continue;
    std::istringstream fields(line.substr(field.size()));
    int64_t kb = 0;
    std::string unit;
    if (fields >> kb >> unit && unit == "kB" && kb >= 0) return kb * 1024;
    return std::nullopt;
  }
  return std::nullopt;
}

std::unique_ptr<Collector> make_rss_collector() {
  return std::make_unique<RssCollector>();
}
std::unique_ptr<Collector> make_engine_pools_collector(const CollectorContext& context) {
  return std::make_unique<EnginePoolsCollector>(context);
}

}  // namespace ib
