// AsyncEngine: the engine thread's loop — take what arrived, admit it, apply cancels, step once,
// deliver the step's events to their requests, repeat; failures and shutdown end every request.
#include "engine/async_engine.h"

#include <algorithm>
#include <future>
#include <utility>

#include "core/clock.h"

namespace ib {

const char* request_end_kind_name(RequestEndKind k) {
  switch (k) {
    case RequestEndKind::kFinished:
      return "finished";
    case RequestEndKind::kCancelled:
      return "cancelled";
    case RequestEndKind::kRejected:
      return "rejected";
    case RequestEndKind::kFailed:
      return "failed";
    case RequestEndKind::kUnavailable:
      return "unavailable";
    case RequestEndKind::kShutdown:
      return "shutdown";
  }
  return "?";
}

AsyncEngine::AsyncEngine(AsyncEngineOptions options) : options_(std::move(options)) {}

AsyncEngine::~AsyncEngine() {
  shutdown();
}

Status AsyncEngine::start() {
  IB_ASSERT(!thread_.joinable(), "AsyncEngine::start called twice");
  IB_ASSERT(options_.factory != nullptr, "AsyncEngine needs a factory");
  std::promise<Status> ready;
  auto started = ready.get_future();
  thread_ = std::thread([this, &ready] { run(ready); });
  Status st = started.get();
  if (!st.ok()) thread_.join();
  return st;
}

Status AsyncEngine::submit(GenerationRequest request, RequestCallbacks callbacks) {
  std::vector<Submission> batch;
  batch.push_back(Submission{std::move(request), std::move(callbacks)});
  return submit(std::move(batch));
}

Status AsyncEngine::submit(std::vector<Submission> batch) {
  {
    std::lock_guard lock(mu_);
    if (!running_) return runtime_error("the engine is not running (not started, or shut down)");
    in_flight_ += static_cast<int>(batch.size());
    if (arrivals_.empty()) {
      arrivals_.swap(batch);
    } else {
      for (Submission& s : batch) arrivals_.push_back(std::move(s));
    }
  }
  wake_.notify_one();  // only the engine thread waits on it
  return Ok{};
}

void AsyncEngine::cancel(uint64_t id) {
  {
    std::lock_guard lock(mu_);
    cancels_.push_back(id);
  }
  wake_.notify_one();
}

void AsyncEngine::cancel_all() {
  {
    std::lock_guard lock(mu_);
    cancel_first_ = arrivals_.size();
    cancel_live_ = true;
  }
  wake_.notify_one();
}

void AsyncEngine::wait_idle() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return in_flight_ == 0 || !running_; });
}

bool AsyncEngine::wait_idle_for(std::chrono::nanoseconds timeout) {
  std::unique_lock lock(mu_);
  return idle_.wait_for(lock, timeout, [&] { return in_flight_ == 0 || !running_; });
}

void AsyncEngine::shutdown() {
  IB_ASSERT(!thread_.joinable() || thread_.get_id() != std::this_thread::get_id(),
            "AsyncEngine::shutdown called from its own thread (a callback)");
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

EngineStats AsyncEngine::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

EngineProfile AsyncEngine::profile() const {
  std::lock_guard lock(mu_);
  return profile_;
}

// ---- engine thread ----

void AsyncEngine::run(std::promise<Status>& ready) {
  {
    auto instance = options_.factory();
    if (!instance.ok()) return ready.set_value(instance.error());
    instance_ = std::move(instance).value();
  }
  IB_ASSERT(instance_.engine != nullptr, "the AsyncEngine factory returned no engine");
  if (options_.hooks.on_ready) options_.hooks.on_ready(*instance_.engine);
  snapshot(true);
  {
    std::lock_guard lock(mu_);
    running_ = !stop_;
  }
  ready.set_value(Ok{});
  loop();
  instance_.engine.reset();  // before the backend that owns its memory
  if (instance_.backend && options_.hooks.on_engine_destroyed) {
    options_.hooks.on_engine_destroyed(*instance_.backend);
  }
  instance_.backend.reset();
}

void AsyncEngine::loop() {
  Engine& engine = *instance_.engine;
  std::vector<Submission> arrivals;
  std::vector<uint64_t> cancels;
  for (;;) {
    size_t cancel_first = 0;
    bool cancel_live = false;
    std::vector<Call> calls;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] {
        return stop_ || !arrivals_.empty() || !cancels_.empty() || cancel_live_ ||
               !calls_.empty() || (engine.has_unfinished() && !broken_);
      });
      if (stop_) {
        running_ = false;
        arrivals.swap(arrivals_);
        calls.swap(calls_);
        for (Call& c : calls) c.done.set_value(user_error("the engine was shut down"));
        break;
      }
      arrivals.swap(arrivals_);
      calls.swap(calls_);
      cancels.swap(cancels_);
      cancel_first = std::exchange(cancel_first_, 0);
      cancel_live = std::exchange(cancel_live_, false);
    }
    for (Call& c : calls) c.done.set_value(c.fn(engine));
    if (cancel_live) {
      // Before the arrivals: those beyond cancel_first came after the cancel_all().
      for (auto& [id, live] : live_) {
        live.cancelling = true;
        engine.abort_request(id);
      }
    }
    admit(arrivals, cancel_first, cancels);
    for (uint64_t id : cancels) {
      auto it = live_.find(id);
      if (it == live_.end() || it->second.cancelling) continue;
      it->second.cancelling = true;
      engine.abort_request(id);
    }
    cancels.clear();
    if (engine.has_unfinished() && !broken_) {
      step();
    } else if (!broken_) {
      snapshot(false);  // arrivals or cancels changed the queue
    }
    finish_orphans();
    if (options_.hooks.after_pass) options_.hooks.after_pass(engine);
  }
  // Shut down with work left: every request still gets its on_finish.
  const int64_t t = now_ns();
  for (Submission& s : arrivals) {
    finish_unadmitted(s.request.id, s.callbacks,
                      RequestEnd{RequestEndKind::kShutdown, FinishReason::kAborted,
                                 "the engine was shut down", t, 0, 0});
  }
  fail_live(RequestEndKind::kShutdown, "the engine was shut down");
}

Status AsyncEngine::call(std::function<Status(Engine&)> fn) {
  std::future<Status> result;
  {
    std::lock_guard lock(mu_);
    if (!running_ || stop_) return user_error("the engine is not running");
    calls_.push_back(Call{std::move(fn), {}});
    result = calls_.back().done.get_future();
  }
  wake_.notify_all();
  return result.get();
}

void AsyncEngine::admit(std::vector<Submission>& arrivals, size_t cancel_first,
                        std::vector<uint64_t>& cancels) {
  Engine& engine = *instance_.engine;
  for (size_t i = 0; i < arrivals.size(); ++i) {
    Submission& s = arrivals[i];
    const uint64_t id = s.request.id;
    if (broken_) {
      finish_unadmitted(id, s.callbacks,
                        RequestEnd{RequestEndKind::kUnavailable, FinishReason::kAborted,
                                   broken_message_, now_ns(), 0, 0});
      continue;
    }
    if (i < cancel_first || std::find(cancels.begin(), cancels.end(), id) != cancels.end()) {
      finish_unadmitted(
          id, s.callbacks,
          RequestEnd{RequestEndKind::kCancelled, FinishReason::kAborted, "", now_ns(), 0, 0});
      continue;
    }
    const int prompt_tokens = static_cast<int>(s.request.prompt_tokens.size());
    Status st = engine.add_request(std::move(s.request));
    if (!st.ok()) {
      finish_unadmitted(id, s.callbacks,
                        RequestEnd{RequestEndKind::kRejected, FinishReason::kAborted,
                                   st.error().message, now_ns(), 0, 0});
      continue;
    }
    live_.emplace(id, Live{std::move(s.callbacks), prompt_tokens, 0, false});
  }
  arrivals.clear();
}

void AsyncEngine::step() {
  Engine& engine = *instance_.engine;
  auto out = engine.step();
  if (!out.ok()) {
    // A device failure: fail everything in flight and refuse further work.
    broken_ = true;
    broken_message_ = out.error().message;
    fail_live(RequestEndKind::kFailed, broken_message_);
    return;
  }
  if (options_.hooks.on_step) options_.hooks.on_step(engine, out->stats);
  // Before the events: a caller may read the snapshots as soon as its last request finishes.
  snapshot(!engine.has_unfinished());
  for (const TokenEvent& ev : out->events) {
    auto it = live_.find(ev.request_id);
    if (it == live_.end()) continue;
    if (ev.finish == FinishReason::kAborted) {
      finish_live(
          it, RequestEnd{RequestEndKind::kCancelled, FinishReason::kAborted, "", ev.time_ns, 0, 0});
      continue;
    }
    ++it->second.output_tokens;
    if (it->second.callbacks.on_token) it->second.callbacks.on_token(ev);
    if (ev.finish != FinishReason::kNone) {
      finish_live(it, RequestEnd{RequestEndKind::kFinished, ev.finish, "", ev.time_ns, 0, 0});
    }
  }
  if (out->stats.oom && options_.fail_on_oom) {
    // The KV pool could not grow: every request in flight ends here, marked out of memory (the
    // engine frees their blocks), and the engine takes no more work.
    broken_ = true;
    broken_message_ = "out of memory: " + engine.stats().oom_message;
    for (const auto& [id, live] : live_) engine.abort_request(id);
    snapshot(true);
    fail_live(RequestEndKind::kFailed, broken_message_);
  }
}

void AsyncEngine::fail_live(RequestEndKind kind, const std::string& error) {
  while (!live_.empty()) {
    finish_live(live_.begin(), RequestEnd{kind, FinishReason::kAborted, error, now_ns(), 0, 0});
  }
}

// Requests the engine dropped without an event (it has nothing left to run).
void AsyncEngine::finish_orphans() {
  if (broken_ || instance_.engine->has_unfinished()) return;
  while (!live_.empty()) {
    auto it = live_.begin();
    RequestEnd end{RequestEndKind::kCancelled, FinishReason::kAborted, "", now_ns(), 0, 0};
    if (!it->second.cancelling) {
      end.kind = RequestEndKind::kFailed;
      end.error = "the engine finished without completing the request";
    }
    finish_live(it, std::move(end));
  }
}

void AsyncEngine::finish_live(std::unordered_map<uint64_t, Live>::iterator it, RequestEnd end) {
  const uint64_t id = it->first;
  end.prompt_tokens = it->second.prompt_tokens;
  end.output_tokens = it->second.output_tokens;
  auto on_finish = std::move(it->second.callbacks.on_finish);
  live_.erase(it);
  if (on_finish) on_finish(id, end);
  {
    std::lock_guard lock(mu_);
    --in_flight_;
  }
  idle_.notify_all();
}

void AsyncEngine::finish_unadmitted(uint64_t id, RequestCallbacks& callbacks,
                                    const RequestEnd& end) {
  if (callbacks.on_finish) callbacks.on_finish(id, end);
  {
    std::lock_guard lock(mu_);
    --in_flight_;
  }
  idle_.notify_all();
}

void AsyncEngine::snapshot(bool with_profile) {
  const Engine& engine = *instance_.engine;
  EngineStats s = engine.stats();
  if (with_profile) {
    EngineProfile p = engine.profile();
    std::lock_guard lock(mu_);
    stats_ = std::move(s);
    profile_ = std::move(p);
    return;
  }
  std::lock_guard lock(mu_);
  stats_ = std::move(s);
}

}  // namespace ib
