#include "runner/runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include <fmt/format.h>

#include "core/clock.h"
#include "workload/arrival.h"

namespace ib {

// One phase: the warm-up, or one run over the workload.
struct Runner::Phase {
  int run = 0;
  bool warmup = false;
  std::vector<const RequestSpec*> specs;
  size_t next = 0;  // next spec to submit
  int submitted = 0;
  int done = 0;  // finished and handed to the hooks
  int64_t output_tokens = 0;
  int64_t start_ns = 0;
  bool interrupted = false;
  bool hooks_enabled = true;
  std::vector<RequestRecord> records;
  int outstanding() const { return submitted - done; }
};

namespace {

// The record of a request about to be sent (t_send_ns is set by the caller).
RequestRecord new_record(const RequestSpec& spec, uint64_t id, int run, int64_t t_sched_ns) {
  RequestRecord r;
  r.run = run;
  r.id = id;
  r.prompt_index = spec.id;
  r.t_sched_ns = t_sched_ns;
  r.n_in = spec.input_len;
  r.n_out_requested = spec.output_len;
  r.lora_name = spec.lora_name;
  return r;
}

}  // namespace

const char* load_mode_name(LoadMode mode) {
  switch (mode) {
    case LoadMode::kStatic:
      return "static";
    case LoadMode::kClosed:
      return "closed";
    case LoadMode::kOpen:
      return "open";
  }
  return "?";
}

Status validate_runner_options(const RunnerOptions& o) {
  if (o.runs <= 0) return user_error(fmt::format("--runs must be positive (got {})", o.runs));
  if (o.num_warmups < 0) {
    return user_error(fmt::format("--num-warmups must be >= 0 (got {})", o.num_warmups));
  }
  if (o.mode == LoadMode::kStatic && o.batch_size <= 0) {
    return user_error(fmt::format("--batch-size must be positive (got {})", o.batch_size));
  }
  if (o.max_concurrency < 0 || (o.mode == LoadMode::kClosed && o.max_concurrency == 0)) {
    return user_error(fmt::format("--max-concurrency must be positive for a closed loop (got {})",
                                  o.max_concurrency));
  }
  if (o.mode == LoadMode::kOpen) IB_TRY(validate_arrival(o.request_rate, o.burstiness));
  return Ok{};
}

int64_t SteadyRunnerClock::now_ns() {
  return ib::now_ns();
}

void SteadyRunnerClock::sleep_until_ns(int64_t t_ns) {
  const int64_t wait = t_ns - ib::now_ns();
  if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
}

Runner::Runner(Target& target, RunnerOptions options, RunnerClock& clock)
    : target_(target), options_(options), clock_(clock) {}

TargetCallbacks Runner::callbacks() {
  TargetCallbacks cb;
  cb.on_tokens = [this](uint64_t id, int n, int64_t t) { on_tokens(id, n, t); };
  cb.on_done = [this](uint64_t id, const RequestOutcome& o) { on_done(id, o); };
  return cb;
}

void Runner::on_tokens(uint64_t id, int num_tokens, int64_t time_ns) {
  std::lock_guard lock(mu_);
  auto it = in_flight_.find(id);
  if (it != in_flight_.end()) add_chunk(it->second, num_tokens, time_ns);
}

void Runner::on_done(uint64_t id, const RequestOutcome& outcome) {
  {
    std::lock_guard lock(mu_);
    auto it = in_flight_.find(id);
    if (it == in_flight_.end()) return;
    RequestRecord& r = it->second;
    const int received = static_cast<int>(r.token_times_ns.size());
    if (outcome.prompt_tokens > 0) r.n_in = outcome.prompt_tokens;
    r.n_out = outcome.output_tokens > 0 ? outcome.output_tokens : received;
    r.t_end_ns = received > 0 ? r.token_times_ns.back() : outcome.time_ns;
    r.finish_reason = outcome.finish_reason;
    r.visual_tokens = outcome.visual_tokens;
    r.encode_ns = outcome.encode_ns;
    r.t_scheduled_ns = outcome.first_scheduled_ns;
    r.kv_bytes = outcome.kv_bytes;
    r.ok = outcome.ok && received > 0;
    if (!outcome.ok) {
      r.error = outcome.error.empty() ? "the target reported a failure" : outcome.error;
    } else if (received == 0) {
      r.error = "finished without any output token";
    }
    finished_.push_back(std::move(r));
    in_flight_.erase(it);
  }
  cv_.notify_all();
}

bool Runner::stopping() const {
  return hooks_->stop != nullptr && hooks_->stop->load();
}

Status Runner::submit(const RequestSpec& spec, Phase& phase, int64_t t_sched_ns) {
  RequestSpec request = spec;
  request.id = next_id_++;
  RequestRecord r = new_record(spec, request.id, phase.run, t_sched_ns);
  r.t_send_ns = clock_.now_ns();
  {
    std::lock_guard lock(mu_);
    in_flight_.emplace(request.id, std::move(r));
  }
  Status st = target_.submit(request);
  if (!st.ok()) {
    std::lock_guard lock(mu_);
    in_flight_.erase(request.id);
    return st;
  }
  ++phase.next;
  ++phase.submitted;
  return Ok{};
}

Status Runner::submit_batch(Phase& phase, int count, int64_t t_sched_ns) {
  std::vector<RequestSpec> batch;
  std::vector<RequestRecord> records;
  for (int j = 0; j < count && phase.next + j < phase.specs.size(); ++j) {
    const RequestSpec& spec = *phase.specs[phase.next + j];
    RequestSpec& request = batch.emplace_back(spec);
    request.id = next_id_++;
    records.push_back(new_record(spec, request.id, phase.run, t_sched_ns));
  }
  const int64_t t_send = clock_.now_ns();
  {
    std::lock_guard lock(mu_);
    for (auto& r : records) {
      r.t_send_ns = t_send;
      const uint64_t id = r.id;
      in_flight_.emplace(id, std::move(r));
    }
  }
  Status st = target_.submit_batch(batch);
  if (!st.ok()) {
    std::lock_guard lock(mu_);
    for (const auto& request : batch) in_flight_.erase(request.id);
    return st;
  }
  phase.next += batch.size();
  phase.submitted += static_cast<int>(batch.size());
  return Ok{};
}

Status Runner::collect(Phase& phase, int wait_ms) {
  std::deque<RequestRecord> ready;
  {
    std::unique_lock lock(mu_);
    if (finished_.empty() && wait_ms > 0) {
      cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return !finished_.empty(); });
    }
    ready.swap(finished_);
  }
  // Every collected record is counted even after a hook fails: a record dropped here would stay
  // outstanding for ever.
  Status first_error = Ok{};
  for (RequestRecord& r : ready) {
    ++phase.done;
    if (r.ok) phase.output_tokens += r.n_out;
    if (phase.hooks_enabled && hooks_->on_record) {
      first_error = hooks_->on_record(r);
      if (!first_error.ok()) phase.hooks_enabled = false;  // no hook call after a failing one
    }
    if (phase.hooks_enabled && hooks_->on_progress) {
      hooks_->on_progress(Progress{phase.warmup, std::max(phase.run, 0), options_.runs, phase.done,
                                   static_cast<int>(phase.specs.size()), phase.output_tokens,
                                   clock_.now_ns() - phase.start_ns});
    }
    phase.records.push_back(std::move(r));
  }
  return first_error;
}

Status Runner::run_static(Phase& phase, int batch_size) {
  while (phase.next < phase.specs.size() && !phase.interrupted) {
    if (stopping()) {
      phase.interrupted = true;
      break;
    }
    IB_TRY(submit_batch(phase, batch_size, clock_.now_ns()));
    while (phase.outstanding() > 0) {
      if (stopping()) {
        phase.interrupted = true;
        break;
      }
      IB_TRY(collect(phase, 20));
    }
  }
  return finish_phase(phase);
}

Status Runner::run_closed(Phase& phase, int concurrency) {
  while (!phase.interrupted) {
    if (stopping()) {
      phase.interrupted = true;
      break;
    }
    while (phase.next < phase.specs.size() && phase.outstanding() < concurrency) {
      IB_TRY(submit(*phase.specs[phase.next], phase, clock_.now_ns()));
    }
    if (phase.next == phase.specs.size() && phase.outstanding() == 0) break;
    IB_TRY(collect(phase, 20));
  }
  return finish_phase(phase);
}

Status Runner::run_open(Phase& phase) {
  const auto offsets =
      arrival_offsets_ns(static_cast<int>(phase.specs.size()), options_.request_rate,
                         options_.burstiness, options_.seed);
  const int64_t t0 = clock_.now_ns();
  constexpr int64_t kPollNs = 1'000'000;
  while (phase.next < phase.specs.size()) {
    const int64_t t_sched = t0 + offsets[phase.next];
    for (int64_t now = clock_.now_ns(); now < t_sched && !stopping(); now = clock_.now_ns()) {
      IB_TRY(collect(phase, 0));
      clock_.sleep_until_ns(std::min(t_sched, now + kPollNs));
    }
    while (options_.max_concurrency > 0 && phase.outstanding() >= options_.max_concurrency &&
           !stopping()) {
      IB_TRY(collect(phase, 20));
    }
    if (stopping()) break;
    IB_TRY(submit(*phase.specs[phase.next], phase, t_sched));
  }
  while (phase.outstanding() > 0 && !stopping()) IB_TRY(collect(phase, 20));
  if (phase.next < phase.specs.size() || phase.outstanding() > 0) phase.interrupted = true;
  return finish_phase(phase);
}

Status Runner::finish_phase(Phase& phase) {
  if (phase.interrupted && phase.outstanding() > 0) target_.cancel_all();
  while (phase.outstanding() > 0) IB_TRY(collect(phase, 20));
  return Ok{};
}

Result<BenchmarkRecords> Runner::run(const std::vector<RequestSpec>& requests,
                                     const RunnerHooks& hooks) {
  IB_TRY(validate_runner_options(options_));
  if (requests.empty()) return user_error("the workload has no requests");
  hooks_ = &hooks;
  BenchmarkRecords out;
  auto run_phase = [&](Phase& phase) -> Status {
    phase.start_ns = clock_.now_ns();
    Status st = Ok{};
    if (phase.warmup) {
      const int batch = options_.mode == LoadMode::kStatic ? options_.batch_size
                        : options_.max_concurrency > 0     ? options_.max_concurrency
                                                           : static_cast<int>(phase.specs.size());
      st = run_static(phase, batch);
    } else if (options_.mode == LoadMode::kStatic) {
      st = run_static(phase, options_.batch_size);
    } else if (options_.mode == LoadMode::kClosed) {
      st = run_closed(phase, options_.max_concurrency);
    } else {
      st = run_open(phase);
    }
    if (!st.ok()) {
      // Leave nothing in flight behind an error; the records that still arrive are dropped.
      phase.hooks_enabled = false;
      if (phase.outstanding() > 0) target_.cancel_all();
      while (phase.outstanding() > 0) (void)collect(phase, 20);
    }
    return st;
  };

  if (options_.num_warmups > 0) {
    Phase warm;
    warm.run = kWarmupRun;
    warm.warmup = true;
    for (int i = 0; i < options_.num_warmups; ++i) {
      warm.specs.push_back(&requests[static_cast<size_t>(i) % requests.size()]);
    }
    IB_TRY(run_phase(warm));
    out.warmup = std::move(warm.records);
    if (warm.interrupted) {
      out.interrupted = true;
      return out;
    }
  }
  for (int run = 0; run < options_.runs; ++run) {
    if (hooks.before_run) IB_TRY(hooks.before_run(run));
    Phase phase;
    phase.run = run;
    for (const auto& r : requests) phase.specs.push_back(&r);
    IB_TRY(run_phase(phase));
    if (phase.interrupted) {
      out.partial_run = std::move(phase.records);
      out.interrupted = true;
      break;
    }
    out.runs.push_back(std::move(phase.records));
  }
  return out;
}

}  // namespace ib
