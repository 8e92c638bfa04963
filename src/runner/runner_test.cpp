#include "runner/runner.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "workload/arrival.h"

namespace ib {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int32_t kFailToken = 999;    // a prompt starting with it fails in the fake target
constexpr int32_t kRefuseToken = 998;  // a prompt starting with it is refused by submit()

// Time that moves only when told to: by the runner's sleeps and by the fake target's completions.
class ManualClock : public RunnerClock {
 public:
  int64_t now_ns() override { return t_.load(); }
  void sleep_until_ns(int64_t t_ns) override { advance_to(t_ns); }
  void advance_to(int64_t t_ns) {
    int64_t cur = t_.load();
    while (cur < t_ns && !t_.compare_exchange_weak(cur, t_ns)) {
    }
  }

 private:
  std::atomic<int64_t> t_{0};
};

// A serial server on the manual clock. Requests are served one at a time in submission order:
// request i starts at max(its submit time, the previous end), yields its first token ttft later
// and one token every itl after that; the clock moves to its end just before on_done. A worker
// thread delivers the callbacks after real_delay (so the runner really waits).
class FakeTarget : public Target {
 public:
  FakeTarget(ManualClock& clock, int64_t ttft_ns, int64_t itl_ns, int real_delay_us)
      : clock_(clock), ttft_ns_(ttft_ns), itl_ns_(itl_ns), real_delay_us_(real_delay_us) {}
  ~FakeTarget() override { teardown(); }

  std::string name() const override { return "fake"; }
  Status setup(TargetCallbacks callbacks) override {
    cb_ = std::move(callbacks);
    worker_ = std::thread([this] { loop(); });
    return Ok{};
  }
  Status submit(const RequestSpec& r) override {
    if (!r.prompt_tokens.empty() && r.prompt_tokens[0] == kRefuseToken) {
      return runtime_error("fake target refuses this request");
    }
    std::lock_guard lock(mu_);
    completed_at_submit.push_back(completed_);
    queue_.push_back({r, clock_.now_ns()});
    max_in_flight = std::max(max_in_flight, static_cast<int>(queue_.size()) + busy_);
    cv_.notify_all();
    return Ok{};
  }
  Status submit_batch(const std::vector<RequestSpec>& requests) override {
    batch_sizes.push_back(static_cast<int>(requests.size()));
    return Target::submit_batch(requests);
  }
  void drain() override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return queue_.empty() && busy_ == 0; });
  }
  void cancel_all() override {
    std::deque<Item> dropped;
    {
      std::lock_guard lock(mu_);
      dropped.swap(queue_);
      ++cancels;
    }
    for (const auto& item : dropped) {
      RequestOutcome o;
      o.ok = false;
      o.finish_reason = "aborted";
      o.error = "cancelled";
      o.time_ns = clock_.now_ns();
      cb_.on_done(item.spec.id, o);
    }
  }
  void teardown() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    if (worker_.joinable()) worker_.join();
  }
  std::string describe_json() const override { return "{}"; }

  std::vector<int> completed_at_submit;  // completions reported before each submission
  std::vector<int> batch_sizes;          // of submit_batch() calls
  int max_in_flight = 0;
  int cancels = 0;

 private:
  struct Item {
    RequestSpec spec;
    int64_t submit_ns;
  };
  void loop() {
    int64_t prev_end = 0;
    for (;;) {
      Item item;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        item = std::move(queue_.front());
        queue_.pop_front();
        ++busy_;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(real_delay_us_));
      const int64_t start = std::max(item.submit_ns, prev_end);
      RequestOutcome o;
      o.prompt_tokens = item.spec.input_len;
      if (item.spec.prompt_tokens[0] == kFailToken) {
        o.ok = false;
        o.finish_reason = "error";
        o.error = "fake failure";
        o.time_ns = start + ttft_ns_;
      } else {
        for (int k = 0; k < item.spec.output_len; ++k) {
          cb_.on_tokens(item.spec.id, 1, start + ttft_ns_ + k * itl_ns_);
        }
        o.output_tokens = item.spec.output_len;
        o.finish_reason = "length";
        o.time_ns = start + ttft_ns_ + (item.spec.output_len - 1) * itl_ns_;
      }
      prev_end = o.time_ns;
      clock_.advance_to(o.time_ns);
      {
        std::lock_guard lock(mu_);
        --busy_;
        ++completed_;
        cv_.notify_all();
      }
      cb_.on_done(item.spec.id, o);
    }
  }

  ManualClock& clock_;
  int64_t ttft_ns_, itl_ns_;
  int real_delay_us_;
  TargetCallbacks cb_;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  int busy_ = 0;
  int completed_ = 0;
  bool stop_ = false;
};

std::vector<RequestSpec> requests(int n, int output_len) {
  std::vector<RequestSpec> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto& r = out[static_cast<size_t>(i)];
    r.id = static_cast<uint64_t>(i);
    r.prompt_tokens = {10 + i, 11, 12};
    r.input_len = 3;
    r.output_len = output_len;
  }
  return out;
}

struct Harness {
  ManualClock clock;
  FakeTarget target;
  explicit Harness(int real_delay_us = 0) : target(clock, 10 * kMs, 2 * kMs, real_delay_us) {}

  Result<BenchmarkRecords> run(RunnerOptions opt, const std::vector<RequestSpec>& reqs,
                               RunnerHooks hooks = {}) {
    Runner runner(target, opt, clock);
    IB_TRY(target.setup(runner.callbacks()));
    auto out = runner.run(reqs, hooks);
    target.teardown();
    return out;
  }
};

RunnerOptions closed(int concurrency, int runs = 1) {
  RunnerOptions o;
  o.mode = LoadMode::kClosed;
  o.max_concurrency = concurrency;
  o.runs = runs;
  return o;
}

TEST(Runner, ClosedLoopAtConcurrencyOneIsExact) {
  Harness h;
  auto out = h.run(closed(1), requests(3, 5));
  ASSERT_TRUE(out.ok()) << out.error().message;
  ASSERT_EQ(out->runs.size(), 1u);
  const auto& rs = out->runs[0];
  ASSERT_EQ(rs.size(), 3u);
  for (size_t i = 0; i < rs.size(); ++i) {
    // Service time 10 + 4 * 2 = 18 ms; each request is sent when the previous one ends.
    EXPECT_EQ(rs[i].t_send_ns, static_cast<int64_t>(i) * 18 * kMs);
    EXPECT_EQ(rs[i].queue_ns(), 0);
    EXPECT_EQ(rs[i].ttft_ns(), 10 * kMs);
    EXPECT_EQ(rs[i].e2el_ns(), 18 * kMs);
    EXPECT_DOUBLE_EQ(rs[i].tpot_ms(), 2.0);
    EXPECT_EQ(rs[i].n_out, 5);
    EXPECT_EQ(rs[i].chunks, 5);
    EXPECT_TRUE(rs[i].ok);
    EXPECT_EQ(rs[i].prompt_index, i);
  }
  const auto m = compute_run_metrics(rs, {});
  EXPECT_DOUBLE_EQ(m.duration_s, 0.054);
  EXPECT_NEAR(m.output_throughput, 15 / 0.054, 1e-9);
  EXPECT_NEAR(m[LatencyMetric::kItl].mean_ms, 2.0, 1e-12);
  EXPECT_EQ(m[LatencyMetric::kItl].count, 12u);
}

TEST(Runner, OpenLoopSendsOnScheduleWithoutQueueing) {
  Harness h;
  RunnerOptions o;
  o.mode = LoadMode::kOpen;
  o.request_rate = 10;  // 100 ms apart on average, service takes 18 ms
  o.burstiness = 1e6;   // nearly constant gaps
  o.seed = 3;
  o.runs = 1;
  auto out = h.run(o, requests(5, 5));
  ASSERT_TRUE(out.ok()) << out.error().message;
  const auto offsets = arrival_offsets_ns(5, 10, 1e6, 3);
  const auto& rs = out->runs[0];
  ASSERT_EQ(rs.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(rs[i].t_sched_ns, offsets[i]);
    EXPECT_EQ(rs[i].t_send_ns, offsets[i]);
    EXPECT_EQ(rs[i].ttft_ns(), 10 * kMs);
  }
  EXPECT_EQ(rs.back().t_sched_ns, 500 * kMs);  // last arrival at N / rate
}

TEST(Runner, OpenLoopConcurrencyCapShowsAsQueueTime) {
  Harness h;
  RunnerOptions o;
  o.mode = LoadMode::kOpen;  // infinite rate: everything scheduled at 0
  o.max_concurrency = 1;
  o.runs = 1;
  auto out = h.run(o, requests(3, 5));
  ASSERT_TRUE(out.ok()) << out.error().message;
  const auto& rs = out->runs[0];
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rs[i].t_sched_ns, 0);
    EXPECT_EQ(rs[i].queue_ns(), static_cast<int64_t>(i) * 18 * kMs);
    EXPECT_EQ(rs[i].ttft_ns(), 10 * kMs);
  }
  const auto m = compute_run_metrics(rs, {});
  EXPECT_NEAR(m[LatencyMetric::kE2elQueue].mean_ms, (18 + 36 + 54) / 3.0, 1e-9);
  EXPECT_NEAR(m[LatencyMetric::kQueue].median_ms, 18, 1e-9);
}

TEST(Runner, StaticBatchSendsTheNextBatchWhenAllFinished) {
  Harness h(500);
  RunnerOptions o;
  o.batch_size = 4;
  o.runs = 1;
  auto out = h.run(o, requests(10, 3));
  ASSERT_TRUE(out.ok()) << out.error().message;
  ASSERT_EQ(h.target.completed_at_submit.size(), 10u);
  for (size_t k = 0; k < 10; ++k) {
    EXPECT_GE(h.target.completed_at_submit[k], static_cast<int>(k / 4 * 4)) << k;
  }
  // Each batch is handed over in one call, with one decision and one send time.
  EXPECT_EQ(h.target.batch_sizes, (std::vector<int>{4, 4, 2}));
  const auto& rs = out->runs[0];
  for (size_t k = 0; k < rs.size(); ++k) {
    EXPECT_EQ(rs[k].t_sched_ns, rs[k / 4 * 4].t_sched_ns);
    EXPECT_EQ(rs[k].t_send_ns, rs[k / 4 * 4].t_send_ns);
  }
}

TEST(Runner, ClosedLoopKeepsExactlyTheConcurrency) {
  Harness h(2000);
  auto out = h.run(closed(3), requests(12, 2));
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(h.target.max_in_flight, 3);
  EXPECT_EQ(out->runs[0].size(), 12u);
  EXPECT_TRUE(h.target.batch_sizes.empty());  // one request at a time
}

TEST(Runner, WarmupsAreSeparateAndRunsRepeatTheWorkload) {
  Harness h;
  RunnerOptions o = closed(2, 3);
  o.num_warmups = 2;
  int hooked = 0;
  int progress_calls = 0;
  RunnerHooks hooks;
  hooks.on_record = [&](const RequestRecord&) -> Status {
    ++hooked;
    return Ok{};
  };
  hooks.on_progress = [&](const Progress& p) {
    ++progress_calls;
    EXPECT_LE(p.done, p.total);
  };
  auto out = h.run(o, requests(4, 2), hooks);
  ASSERT_TRUE(out.ok()) << out.error().message;
  ASSERT_EQ(out->warmup.size(), 2u);
  for (const auto& r : out->warmup) EXPECT_EQ(r.run, kWarmupRun);
  ASSERT_EQ(out->runs.size(), 3u);
  std::set<uint64_t> ids;
  for (int run = 0; run < 3; ++run) {
    ASSERT_EQ(out->runs[run].size(), 4u);
    std::set<uint64_t> prompts;
    for (const auto& r : out->runs[run]) {
      EXPECT_EQ(r.run, run);
      ids.insert(r.id);
      prompts.insert(r.prompt_index);
    }
    EXPECT_EQ(prompts.size(), 4u);
  }
  EXPECT_EQ(ids.size(), 12u);
  EXPECT_EQ(hooked, 14);
  EXPECT_EQ(progress_calls, 14);
  EXPECT_FALSE(out->interrupted);
}

TEST(Runner, FailedRequestsAreKeptAndCounted) {
  Harness h;
  auto reqs = requests(4, 3);
  reqs[1].prompt_tokens[0] = kFailToken;
  auto out = h.run(closed(2), reqs);
  ASSERT_TRUE(out.ok()) << out.error().message;
  int failed = 0;
  for (const auto& r : out->runs[0]) {
    if (!r.ok) {
      ++failed;
      EXPECT_EQ(r.error, "fake failure");
      EXPECT_EQ(r.finish_reason, "error");
    }
  }
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(compute_run_metrics(out->runs[0], {}).failed, 1);
}

TEST(Runner, StopFlagCancelsInFlightAndKeepsFinishedRecords) {
  Harness h(1000);
  std::atomic<bool> stop{false};
  std::vector<RequestRecord> seen;
  RunnerHooks hooks;
  hooks.stop = &stop;
  hooks.on_record = [&](const RequestRecord& r) -> Status {
    seen.push_back(r);
    if (seen.size() == 6) stop = true;  // two requests into the second run
    return Ok{};
  };
  auto out = h.run(closed(2, 3), requests(4, 3), hooks);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_TRUE(out->interrupted);
  ASSERT_EQ(out->runs.size(), 1u);
  EXPECT_EQ(out->runs[0].size(), 4u);
  // Everything submitted in the second run came back: finished or aborted, none lost.
  EXPECT_GE(out->partial_run.size(), 2u);
  EXPECT_EQ(seen.size(), 4u + out->partial_run.size());
  for (const auto& r : out->partial_run) {
    if (!r.ok) {
      EXPECT_EQ(r.finish_reason, "aborted");
    }
  }
  EXPECT_LE(out->partial_run.size(), 4u);
}

TEST(Runner, StopBeforeTheStartSubmitsNothing) {
  for (LoadMode mode : {LoadMode::kStatic, LoadMode::kClosed, LoadMode::kOpen}) {
    Harness h;
    std::atomic<bool> stop{true};
    RunnerHooks hooks;
    hooks.stop = &stop;
    RunnerOptions o = closed(2, 2);
    o.mode = mode;
    o.num_warmups = 2;
    auto out = h.run(o, requests(4, 3), hooks);
    ASSERT_TRUE(out.ok()) << out.error().message;
    EXPECT_TRUE(out->interrupted);
    EXPECT_TRUE(out->warmup.empty());
    EXPECT_TRUE(out->runs.empty());
    EXPECT_TRUE(h.target.completed_at_submit.empty()) << load_mode_name(mode);
  }
}

TEST(Runner, HookErrorStopsTheBenchmarkAndIsReturned) {
  Harness h(500);
  RunnerHooks hooks;
  int n = 0;
  hooks.on_record = [&](const RequestRecord&) -> Status {
    if (++n == 2) return runtime_error("disk full");
    // A slow first hook lets the two requests still in flight finish, so the failing record is
    // collected together with one behind it: that one must still be accounted for, or the runner
    // waits for it for ever.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return Ok{};
  };
  auto out = h.run(closed(3), requests(6, 2), hooks);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().message, "disk full");
  EXPECT_EQ(n, 2);  // no hook call after the failing one
}

TEST(Runner, BeforeRunPrecedesEachMeasuredRunAndItsErrorStops) {
  Harness h;
  RunnerOptions o = closed(2, 3);
  o.num_warmups = 1;
  std::vector<std::pair<int, int>> calls;  // (run, records seen before it)
  int records = 0;
  RunnerHooks hooks;
  hooks.on_record = [&](const RequestRecord&) -> Status {
    ++records;
    return Ok{};
  };
  hooks.before_run = [&](int run) -> Status {
    calls.emplace_back(run, records);
    if (run == 2) return runtime_error("client 1 failed before run 2");
    return Ok{};
  };
  auto out = h.run(o, requests(4, 2), hooks);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().message, "client 1 failed before run 2");
  // After the warm-up's record, then after each whole run of 4.
  const std::vector<std::pair<int, int>> want = {{0, 1}, {1, 5}, {2, 9}};
  EXPECT_EQ(calls, want);
}

TEST(Runner, SubmitErrorIsReturned) {
  Harness h;
  auto reqs = requests(3, 2);
  reqs[2].prompt_tokens[0] = kRefuseToken;
  auto out = h.run(closed(1), reqs);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().kind, ErrorKind::kRuntime);
}

TEST(Runner, RejectsBadOptions) {
  Harness h;
  RunnerOptions o = closed(0);
  auto out = h.run(o, requests(2, 2));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("--max-concurrency"), std::string::npos);
  o = closed(1, 0);
  EXPECT_NE(h.run(o, requests(2, 2)).error().message.find("--runs"), std::string::npos);
}

TEST(Progress, FormatsRateAndEta) {
  Progress p{false, 1, 3, 50, 200, 6400, 2'000'000'000};
  EXPECT_EQ(format_progress(p), "run 2/3  50/200 requests  3200.0 tok/s  ETA 0:06");
  p.warmup = true;
  p.done = 0;
  EXPECT_EQ(format_progress(p), "warm-up  0/200 requests  3200.0 tok/s  ETA --:--");
}

}  // namespace
}  // namespace ib
