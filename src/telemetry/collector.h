// Collector: a metric source sampled on the sampler thread, on the one clock. Collectors are
// plugins ("rss", "engine-pools", "nvml").
//
// Call order: start() once, sample() every interval, stop() once, never concurrently: start()
// and stop() on the thread that owns the Sampler, sample() on its thread; summary() after stop().
// columns() is fixed once start() returned; append_values() follows each sample() on the same
// thread and appends exactly columns().size() values (NaN where a value was not available).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"
#include "targets/target.h"

namespace ib {

class Collector {
 public:
  virtual ~Collector() = default;
  virtual std::string name() const = 0;
  // origin_ns: the benchmark's time zero. An error disables the benchmark (returned by Sampler).
  virtual Status start(int64_t origin_ns) = 0;
  virtual void sample(int64_t now_ns) = 0;
  virtual void stop(int64_t now_ns) = 0;
  // What result.json keeps (peaks, sample counts), under memory.<name>.
  virtual nlohmann::json summary() const = 0;
  // The series of each sample, named with their unit ("rss_bytes", "gpu0_power_w").
  virtual std::vector<std::string> columns() const { return {}; }
  virtual void append_values(std::vector<double>& /*row*/) const {}
};

// What a collector may look at.
// The NVML library to load: $INFERBENCH_NVML_LIBRARY when set and non-empty (another NVML
// build; the tests load a fake one), else the driver's libnvidia-ml.so.1.
std::string nvml_library_path();

struct CollectorContext {
  // The target's own memory pools; safe to call from the sampler thread.
  std::function<std::optional<TargetMemory>()> target_memory;
  // The NVML library the "nvml" collector loads (tests pass a fake one).
  std::string nvml_library = nvml_library_path();
  // One-line notices (a missing NVML library); stderr when unset.
  std::function<void(const std::string&)> notice;
  // The target's tensor-parallel ranks (--tensor-parallel-size), known before it loads: above 1
  // the engine-pools collector has a demand series per rank.
  int tensor_parallel_ranks = 1;
};
using CollectorFactory = std::function<std::unique_ptr<Collector>(const CollectorContext&)>;

// Process resident memory: /proc/self/statm every sample, and VmHWM (the kernel's peak) at stop.
// Column: rss_bytes.
std::unique_ptr<Collector> make_rss_collector();
// The target's pools. Columns: engine_allocated_bytes (everything the tracked allocator holds;
// the backends allocate from the driver directly, so this is also what the allocator reserves),
// weights_bytes, kv_pool_bytes, kv_used_bytes (KV blocks in use x block bytes),
// activations_bytes (activations + workspace), graph_bytes (rank 0's under tensor parallelism),
// and with context.tensor_parallel_ranks N > 1 rank0_demand_bytes .. rank<N-1>_demand_bytes
// (TargetMemory::rank_demand_bytes).
std::unique_ptr<Collector> make_engine_pools_collector(const CollectorContext& context);
// NVML, loaded with dlopen from context.nvml_library; one series group per GPU (nvml.h).
std::unique_ptr<Collector> make_nvml_collector(const CollectorContext& context);

// Parsers of /proc files, exposed for tests. Resident bytes from statm text; a kB field such
// as "VmHWM:" from status text. nullopt when absent or malformed.
std::optional<int64_t> parse_statm_resident_bytes(const std::string& statm, int64_t page_bytes);
std::optional<int64_t> parse_status_kb_field(const std::string& status, const std::string& field);

}  // namespace ib
