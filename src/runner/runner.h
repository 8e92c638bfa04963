// Front door of runner/: drives a Target with a workload in a load mode, records every request
// on the one clock, repeats the benchmark --runs times after warm-up, and computes metrics
// (metrics.h).
//
// Threading: run() is called on one thread (the "runner thread"), which is also the only thread
// that submits to the target and the only one that calls the hooks. The target's callbacks
// (from callbacks()) may come from any thread; they only touch state under the runner's mutex.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/result.h"
#include "runner/metrics.h"   // IWYU pragma: export
#include "runner/progress.h"  // IWYU pragma: export
#include "runner/records.h"   // IWYU pragma: export
#include "targets/target.h"

namespace ib {

enum class LoadMode {
  kStatic,  // --batch-size requests together; the next batch when all of them finished
  kClosed,  // --max-concurrency requests in flight; a new one as soon as one finishes
  kOpen,    // arrivals at --request-rate (gamma gaps); --max-concurrency optionally caps
};
const char* load_mode_name(LoadMode mode);

struct RunnerOptions {
  LoadMode mode = LoadMode::kStatic;
  int batch_size = 8;
  int max_concurrency = 0;  // kClosed: required; kOpen: 0 means no cap
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  uint64_t seed = 0;    // arrival schedule (the same schedule every run)
  int num_warmups = 0;  // requests before the first run, excluded from statistics
  int runs = 3;
};
// User errors for non-positive counts, a closed loop without a concurrency, a bad rate.
Status validate_runner_options(const RunnerOptions& options);

// The runner's view of time: the one clock in production; tests substitute a manual clock.
class RunnerClock {
 public:
  virtual ~RunnerClock() = default;
  virtual int64_t now_ns() = 0;
  virtual void sleep_until_ns(int64_t t_ns) = 0;
};
class SteadyRunnerClock : public RunnerClock {
 public:
  int64_t now_ns() override;
  void sleep_until_ns(int64_t t_ns) override;
};

struct RunnerHooks {
  // Each finished request (warm-up ones too, run == kWarmupRun), as it finishes. An error stops
  // the benchmark (in-flight requests are cancelled) and run() returns it.
  std::function<Status(const RequestRecord&)> on_record;
  std::function<void(const Progress&)> on_progress;
  // Before each measured run (its index), after the warm-ups: an error stops the benchmark
  // (a --num-clients client waits here for the others, orchestrate/detail/client_sync.h).
  std::function<Status(int run)> before_run;
  // Set from another thread (Ctrl-C): stop submitting, cancel in-flight, return what finished.
  const std::atomic<bool>* stop = nullptr;
};

struct BenchmarkRecords {
  std::vector<RequestRecord> warmup;
  std::vector<std::vector<RequestRecord>> runs;  // completed runs only
  std::vector<RequestRecord> partial_run;        // records of the run that was interrupted
  bool interrupted = false;
};

class Runner {
 public:
  Runner(Target& target, RunnerOptions options, RunnerClock& clock);
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // Pass these to target.setup(); they must outlive the target's use of them.
  TargetCallbacks callbacks();

  // Warm-up, then options.runs runs over requests. Runtime errors (a submit that fails, a hook
  // that fails) are returned after in-flight requests are cancelled.
  Result<BenchmarkRecords> run(const std::vector<RequestSpec>& requests, const RunnerHooks& hooks);

 private:
  struct Phase;
  void on_tokens(uint64_t id, int num_tokens, int64_t time_ns);
  void on_done(uint64_t id, const RequestOutcome& outcome);

  Status submit(const RequestSpec& spec, Phase& phase, int64_t t_sched_ns);
  // Submits specs [phase.next, phase.next + count) together (Target::submit_batch).
  Status submit_batch(Phase& phase, int count, int64_t t_sched_ns);
  // Hands finished records to the hooks; waits up to wait_ms for one when none is ready.
  Status collect(Phase& phase, int wait_ms);
  int in_flight();
  bool stopping() const;
  // Runs one phase in a load mode; returns once every request finished or the stop flag was
  // seen (then in-flight requests are cancelled and awaited).
  Status run_static(Phase& phase, int batch_size);
  Status run_closed(Phase& phase, int concurrency);
  Status run_open(Phase& phase);
  Status finish_phase(Phase& phase);

  Target& target_;
  RunnerOptions options_;
  RunnerClock& clock_;
  const RunnerHooks* hooks_ = nullptr;
  uint64_t next_id_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<uint64_t, RequestRecord> in_flight_;  // guarded by mu_
  std::deque<RequestRecord> finished_;                     // guarded by mu_
};

}  // namespace ib
