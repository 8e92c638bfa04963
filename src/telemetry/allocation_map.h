// Allocation tracing analysis: the tracked allocator's alloc/free trace replayed into an
// address-ordered block map of 64 KiB cells over time, and fragmentation after every change.
//
// "Free" needs a definition here because the backends take memory from the driver (cudaMalloc,
// aligned host allocations) without a caching pool: the span considered is the address ranges
// the allocator has held at some time so far (merged into regions where they touch, 64 KiB
// granular). A cell is "unmapped" until first allocated, "free" when it was held before but
// holds nothing now, otherwise owned by the tag of its latest allocation. Free extents never
// cross a region boundary. External fragmentation = 1 - largest_free / total_free (0 when
// nothing is free).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/memory_tracker.h"
#include "telemetry/timeline.h"

namespace ib {

inline constexpr int64_t kBlockMapCellBytes = 64 << 10;

struct FragmentationPoint {
  int64_t time_ns = 0;     // since the origin
  int64_t span_bytes = 0;  // cells held at some time so far, x 64 KiB
  int64_t allocated_bytes = 0;
  int64_t total_free_bytes = 0;
  int64_t largest_free_bytes = 0;
  double external = 0;  // 1 - largest_free / total_free
};

// The block map as drawn: display rows aggregate cells_per_row consecutive cells (address
// order, regions concatenated) and show their majority state.
struct BlockMap {
  int64_t cell_bytes = kBlockMapCellBytes;
  int64_t num_cells = 0;
  int64_t cells_per_row = 1;
  std::vector<std::string> states;           // index 0 "unmapped", 1 "free", then the tags
  std::vector<int64_t> frame_time_ns;        // (frames)
  std::vector<std::vector<uint8_t>> frames;  // (frames, display rows): index into states
  std::vector<uint64_t> region_base;         // (regions): first address of each region
  std::vector<int64_t> region_first_cell;    // (regions)
};

struct AllocationEventRow {
  int64_t time_ns = 0;  // since the origin
  uint64_t address = 0;
  int64_t bytes = 0;  // positive: alloc, negative: free
  std::string tag;
  std::string phase;
};

struct AllocationAnalysis {
  std::vector<AllocationEventRow> events;         // time order, with their phase
  std::vector<FragmentationPoint> fragmentation;  // after each change, time order
  BlockMap block_map;
  // Fragmentation in force at t_ns (the last point at or before it; zeros before the first).
  FragmentationPoint fragmentation_at(int64_t t_ns) const;
  nlohmann::json summary(const std::vector<StepRecord>& steps) const;
};

// Bytes live per tag at each of times_ns (relative to origin_ns), replaying the trace: the
// engine's pools before the engine exists (while the weights load).
std::vector<std::array<int64_t, kNumMemoryTags>> live_bytes_by_tag(
    const std::vector<MemoryEvent>& events, int64_t origin_ns,
    const std::vector<int64_t>& times_ns);

// events: the tracker's trace (absolute times). frame_time_ns: where to draw the block map
// (relative to origin_ns). max_display_rows bounds the drawing, not the analysis.
AllocationAnalysis analyze_allocations(const std::vector<MemoryEvent>& events, int64_t origin_ns,
                                       const std::vector<PhaseSpan>& phases,
                                       const std::vector<int64_t>& frame_time_ns,
                                       int max_display_rows = 512);

}  // namespace ib
