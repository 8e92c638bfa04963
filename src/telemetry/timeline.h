// Timeline: the samples of every collector on the one clock, one row per sampler tick, and the
// phase markers (load, warm-up, run k, idle; prefill-heavy and decode-heavy engine steps) that
// give those samples their meaning.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace ib {

struct Timeline {
  std::vector<std::string> columns;       // names carry units: "rss_bytes", "gpu0_power_w"
  std::vector<int64_t> time_ns;           // (samples): since the benchmark's origin
  std::vector<std::vector<double>> rows;  // (samples, columns); NaN: not available

  // Index of a column, or -1.
  int column(const std::string& name) const;
  // Linear interpolation of column col at t_ns; NaN outside the samples or next to a NaN.
  double value_at(int col, int64_t t_ns) const;
  // Largest finite value of a column; NaN when it has none.
  double max_of(int col) const;
  // Appends a derived column (values: one per sample).
  void add_column(const std::string& name, const std::vector<double>& values);
};

// A named interval on the one clock, relative to the origin: "load", "warm-up", "run 0", ...
struct PhaseSpan {
  std::string name;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};
// The phase containing t_ns, "idle" when none does.
std::string phase_at(const std::vector<PhaseSpan>& phases, int64_t t_ns);

// One engine step (StepStats), relative to the origin. A step is prefill-heavy when it
// processes more prompt tokens than decode tokens, decode-heavy otherwise.
struct StepRecord {
  int64_t start_ns = 0;
  int64_t duration_ns = 0;
  int prefill_tokens = 0;
  int decode_tokens = 0;
  // Where the step's wall time went (steps.csv): the sequences in its batch, its host phases
  // (StepStats' clocks: scheduling, enqueueing the device work, waiting for its results, token
  // bookkeeping; -1 where the step ran nothing), its device time (-1: not measured) and whether
  // it replayed a decode graph.
  int num_seqs = 0;
  int64_t schedule_ns = -1, launch_ns = -1, wait_ns = -1, finish_ns = -1;
  int64_t device_ns = -1;
  bool graph = false;
  bool prefill_heavy() const { return prefill_tokens > decode_tokens; }
};

// Time and tokens of the steps within [t0_ns, t1_ns), split by kind: prompt tokens of the
// prefill-heavy steps, generated tokens of the decode-heavy ones. A step that straddles a
// boundary counts in proportion to its overlap. steps must be sorted by start_ns.
struct StepShare {
  int64_t prefill_ns = 0;
  int64_t decode_ns = 0;
  double prefill_tokens = 0;
  double decode_tokens = 0;
};
StepShare step_share(const std::vector<StepRecord>& steps, int64_t t0_ns, int64_t t1_ns);
// "prefill", "decode" or "idle": the kind of step that took most of [t0_ns, t1_ns).
std::string step_kind_in(const std::vector<StepRecord>& steps, int64_t t0_ns, int64_t t1_ns);

// steps.csv: one row per engine step, in start order, times relative to the origin: start_ms, the
// benchmark phase it began in (phase_at), num_seqs, prefill_tokens, decode_tokens, duration_us,
// gap_before_us (the host's time from the previous step's end: the engine loop between steps),
// schedule_us, launch_us, wait_us, finish_us, device_us (empty where not measured) and graph
// (0/1).
inline constexpr const char* kStepsCsv = "steps.csv";
std::string steps_csv(const std::vector<StepRecord>& steps, const std::vector<PhaseSpan>& phases);

// Steps as the engine thread reports them (absolute times); thread-safe.
class StepLog {
 public:
  void add(int64_t start_ns, int64_t duration_ns, int prefill_tokens, int decode_tokens);
  void add(const StepRecord& step);
  // The steps relative to origin_ns, sorted by start.
  std::vector<StepRecord> steps(int64_t origin_ns) const;

 private:
  mutable std::mutex mu_;
  std::vector<StepRecord> steps_;
};

}  // namespace ib
