#include "telemetry/allocation_map.h"

#include <algorithm>
#include <limits>

#include "core/assert.h"

namespace ib {
namespace {

constexpr uint8_t kUnmapped = 0;
constexpr uint8_t kFree = 1;
constexpr uint8_t kFirstTag = 2;

struct Region {
  uint64_t begin = 0;  // 64 KiB aligned
  uint64_t end = 0;
  int64_t first_cell = 0;
};

// Regions: every range ever allocated, widened to whole cells, merged where they touch.
std::vector<Region> regions_of(const std::vector<MemoryEvent>& events) {
  const auto cell = static_cast<uint64_t>(kBlockMapCellBytes);
  std::vector<Region> ranges;
  for (const auto& e : events) {
    if (e.bytes <= 0) continue;
    const uint64_t begin = e.address / cell * cell;
    const uint64_t end = (e.address + static_cast<uint64_t>(e.bytes) + cell - 1) / cell * cell;
    ranges.push_back({begin, end, 0});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Region& a, const Region& b) { return a.begin < b.begin; });
  std::vector<Region> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.begin <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, r.end);
    } else {
      merged.push_back(r);
    }
  }
  int64_t cells = 0;
  for (auto& r : merged) {
    r.first_cell = cells;
    cells += static_cast<int64_t>((r.end - r.begin) / cell);
  }
  return merged;
}

class CellState {
 public:
  explicit CellState(std::vector<Region> regions) : regions_(std::move(regions)) {
    int64_t n = 0;
    for (const auto& r : regions_) n += static_cast<int64_t>(r.end - r.begin) / kBlockMapCellBytes;
    live_bytes_.assign(static_cast<size_t>(n), 0);
    state_.assign(static_cast<size_t>(n), kUnmapped);
  }
  int64_t num_cells() const { return static_cast<int64_t>(state_.size()); }
  const std::vector<uint8_t>& states() const { return state_; }

  void apply(const MemoryEvent& e) {
    const uint64_t size = static_cast<uint64_t>(e.bytes > 0 ? e.bytes : -e.bytes);
    if (size == 0) return;
    auto it = std::upper_bound(regions_.begin(), regions_.end(), e.address,
                               [](uint64_t a, const Region& r) { return a < r.begin; });
    if (it == regions_.begin()) return;  // a free of memory allocated before tracing began
    --it;
    if (e.address >= it->end) return;
    const uint64_t end = std::min(e.address + size, it->end);
    const auto cell = static_cast<uint64_t>(kBlockMapCellBytes);
    for (uint64_t c = e.address / cell * cell; c < end; c += cell) {
      const auto i =
          static_cast<size_t>(it->first_cell + static_cast<int64_t>((c - it->begin) / cell));
      const auto overlap = static_cast<int64_t>(std::min(end, c + cell) - std::max(e.address, c));
      if (e.bytes > 0) {
        live_bytes_[i] += overlap;
        state_[i] = static_cast<uint8_t>(kFirstTag + static_cast<uint8_t>(e.tag));
      } else {
        live_bytes_[i] = std::max<int64_t>(0, live_bytes_[i] - overlap);
        if (live_bytes_[i] == 0) state_[i] = kFree;
      }
    }
    allocated_bytes_ += e.bytes;
  }

  FragmentationPoint measure(int64_t t_ns) const {
    FragmentationPoint p;
    p.time_ns = t_ns;
    p.allocated_bytes = allocated_bytes_;
    for (size_t r = 0; r < regions_.size(); ++r) {
      const auto begin = static_cast<size_t>(regions_[r].first_cell);
      const size_t end =
          r + 1 < regions_.size() ? static_cast<size_t>(regions_[r + 1].first_cell) : state_.size();
      int64_t run = 0;
      for (size_t i = begin; i < end; ++i) {
        if (state_[i] != kUnmapped) p.span_bytes += kBlockMapCellBytes;
        if (state_[i] == kFree) {
          run += kBlockMapCellBytes;
          p.total_free_bytes += kBlockMapCellBytes;
          p.largest_free_bytes = std::max(p.largest_free_bytes, run);
        } else {
          run = 0;
        }
      }
    }
    p.external = p.total_free_bytes > 0 ? 1.0 - static_cast<double>(p.largest_free_bytes) /
                                                    static_cast<double>(p.total_free_bytes)
                                        : 0.0;
    return p;
  }

  const std::vector<Region>& regions() const { return regions_; }

 private:
  std::vector<Region> regions_;
  std::vector<int64_t> live_bytes_;  // (cells)
  std::vector<uint8_t> state_;       // (cells)
  int64_t allocated_bytes_ = 0;
};

// Majority state of each display row (ties go to the higher index: owners before free).
std::vector<uint8_t> display_rows(const std::vector<uint8_t>& cells, int64_t per_row,
                                  size_t num_states) {
  std::vector<uint8_t> out;
  std::vector<int64_t> counts(num_states);
  for (size_t begin = 0; begin < cells.size(); begin += static_cast<size_t>(per_row)) {
    std::fill(counts.begin(), counts.end(), 0);
    const size_t end = std::min(cells.size(), begin + static_cast<size_t>(per_row));
    for (size_t i = begin; i < end; ++i) ++counts[cells[i]];
    size_t best = 0;
    for (size_t s = 1; s < num_states; ++s) {
      if (counts[s] >= counts[best] && counts[s] > 0) best = s;
    }
    out.push_back(static_cast<uint8_t>(best));
  }
  return out;
}

}  // namespace

FragmentationPoint AllocationAnalysis::fragmentation_at(int64_t t_ns) const {
  auto it = std::upper_bound(fragmentation.begin(), fragmentation.end(), t_ns,
                             [](int64_t t, const FragmentationPoint& p) { return t < p.time_ns; });
  if (it == fragmentation.begin()) return FragmentationPoint{t_ns, 0, 0, 0, 0, 0};
  return *(it - 1);
}

nlohmann::json AllocationAnalysis::summary(const std::vector<StepRecord>& steps) const {
  int64_t allocs = 0;
  int64_t frees = 0;
  for (const auto& e : events) (e.bytes > 0 ? allocs : frees) += 1;
  double max_external = 0;
  int64_t max_span = 0;
  for (const auto& p : fragmentation) max_span = std::max(max_span, p.span_bytes);
  // Per engine step: the fragmentation in force when the step started.
  int64_t fragmented_steps = 0;
  for (const auto& s : steps) {
    const FragmentationPoint p = fragmentation_at(s.start_ns);
    max_external = std::max(max_external, p.external);
    if (p.total_free_bytes > 0) ++fragmented_steps;
  }
  const FragmentationPoint last =
      steps.empty() ? FragmentationPoint{} : fragmentation_at(steps.back().start_ns);
  return nlohmann::json{
      {"definition",
       "free = 64 KiB cells the allocator held earlier in the run and holds no longer, within "
       "the address ranges it has held (merged where they touch); external fragmentation = 1 - "
       "largest free extent / total free"},
      {"cell_bytes", kBlockMapCellBytes},
      {"allocs", allocs},
      {"frees", frees},
      {"span_peak_bytes", max_span},
      {"regions", block_map.region_base.size()},
      {"steps_evaluated", steps.size()},
      {"steps_with_free_space", fragmented_steps},
      {"external_fragmentation_max_over_steps", max_external},
      {"at_last_step",
       {{"total_free_bytes", last.total_free_bytes},
        {"largest_free_bytes", last.largest_free_bytes},
        {"external", last.external}}}};
}

std::vector<std::array<int64_t, kNumMemoryTags>> live_bytes_by_tag(
    const std::vector<MemoryEvent>& trace, int64_t origin_ns,
    const std::vector<int64_t>& times_ns) {
  std::vector<MemoryEvent> events = trace;
  std::stable_sort(events.begin(), events.end(), [](const MemoryEvent& a, const MemoryEvent& b) {
    return a.time_ns < b.time_ns;
  });
  std::vector<std::array<int64_t, kNumMemoryTags>> out;
  std::array<int64_t, kNumMemoryTags> live{};
  size_t next = 0;
  for (int64_t t : times_ns) {
    for (; next < events.size() && events[next].time_ns - origin_ns <= t; ++next) {
      live[static_cast<size_t>(events[next].tag)] += events[next].bytes;
    }
    out.push_back(live);
  }
  return out;
}

AllocationAnalysis analyze_allocations(const std::vector<MemoryEvent>& trace, int64_t origin_ns,
                                       const std::vector<PhaseSpan>& phases,
                                       const std::vector<int64_t>& frame_time_ns,
                                       int max_display_rows) {
  IB_ASSERT(max_display_rows > 0, "analyze_allocations: max_display_rows must be positive");
  std::vector<MemoryEvent> events = trace;
  std::stable_sort(events.begin(), events.end(), [](const MemoryEvent& a, const MemoryEvent& b) {
    return a.time_ns < b.time_ns;
  });
  AllocationAnalysis out;
  CellState cells(regions_of(events));
  BlockMap& map = out.block_map;
  map.num_cells = cells.num_cells();
  map.cells_per_row =
      std::max<int64_t>(1, (map.num_cells + max_display_rows - 1) / max_display_rows);
  map.states = {"unmapped", "free"};
  for (int t = 0; t < kNumMemoryTags; ++t) {
    map.states.emplace_back(memory_tag_name(static_cast<MemoryTag>(t)));
  }
  for (const auto& r : cells.regions()) {
    map.region_base.push_back(r.begin);
    map.region_first_cell.push_back(r.first_cell);
  }

  // Fragmentation is re-measured after each change, thinned to ~4096 points on huge traces.
  const size_t stride = std::max<size_t>(1, events.size() / 4096);
  size_t next_frame = 0;
  auto draw_until = [&](int64_t t_ns) {
    for (; next_frame < frame_time_ns.size() && frame_time_ns[next_frame] < t_ns; ++next_frame) {
      map.frame_time_ns.push_back(frame_time_ns[next_frame]);
      map.frames.push_back(display_rows(cells.states(), map.cells_per_row, map.states.size()));
    }
  };
  for (size_t i = 0; i < events.size(); ++i) {
    const MemoryEvent& e = events[i];
    const int64_t t = e.time_ns - origin_ns;
    draw_until(t);
    cells.apply(e);
    out.events.push_back({t, e.address, e.bytes, memory_tag_name(e.tag), phase_at(phases, t)});
    const bool last_at_this_time = i + 1 == events.size() || events[i + 1].time_ns != e.time_ns;
    if (last_at_this_time && (i % stride == 0 || i + 1 == events.size())) {
      out.fragmentation.push_back(cells.measure(t));
    }
  }
  draw_until(std::numeric_limits<int64_t>::max());
  return out;
}

}  // namespace ib
