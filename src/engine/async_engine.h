// AsyncEngine: the one asynchronous wrapper around the single-threaded Engine, used by the native
// target and the server. It owns the engine thread: submit requests from any thread, receive each
// request's tokens as the step that produced them ends, cancel one or all, wait, shut down.
//
// Call order: start() once; then submit() / cancel() / cancel_all() / wait_idle() / stats() /
// profile() from any thread; then shutdown() (idempotent; the destructor calls it) from any
// thread but the engine thread. submit() before a successful start() or after shutdown() is
// refused with an error; the other calls are then harmless.
//
// Threading: the factory, every hook and every request callback run on the engine thread, which
// creates, steps and destroys the backend and the engine (CUDA contexts require one thread).
// A request's callbacks come in order: its tokens, then exactly one on_finish, nothing after.
// Callbacks run with no lock held, but they stall the engine while they run: keep them short,
// and never call wait_idle() or shutdown() from one (deadlock). submit() and cancel() from a
// callback are fine. Token timestamps are the engine's own (right after sampling, one clock).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "core/result.h"
#include "engine/engine.h"

namespace ib {

// What the factory builds on the engine thread. The engine is destroyed before the backend.
struct EngineInstance {
  std::unique_ptr<Backend> backend;  // may be null when the caller keeps the backend alive itself
  std::unique_ptr<Engine> engine;
};
using EngineFactory = std::function<Result<EngineInstance>()>;

// How a request ended (exactly one per accepted submit).
enum class RequestEndKind {
  kFinished,     // finish is kLength or kStop; the last on_token carried the same finish
  kCancelled,    // cancel() / cancel_all(); its KV blocks are free
  kRejected,     // Engine::add_request refused it (a user error: error says why)
  kFailed,       // the engine failed while it held the request (device error, out of memory)
  kUnavailable,  // not started: the engine had already failed (error says how)
  kShutdown,     // shutdown() came before it finished
};
const char* request_end_kind_name(RequestEndKind k);

struct RequestEnd {
  RequestEndKind kind = RequestEndKind::kFinished;
  FinishReason finish = FinishReason::kNone;  // kFinished: kLength/kStop; kCancelled: kAborted
  std::string error;                          // empty for kFinished and kCancelled
  int64_t time_ns = 0;    // the last token's (or the abort event's) engine time, else now
  int prompt_tokens = 0;  // 0 when the engine never accepted the request
  int output_tokens = 0;  // tokens delivered through on_token
};

// Per-request callbacks, on the engine thread. Either may be empty.
struct RequestCallbacks {
  std::function<void(const TokenEvent& event)> on_token;  // each generated token, in order
  std::function<void(uint64_t id, const RequestEnd& end)> on_finish;
};

struct Submission {
  GenerationRequest request;
  RequestCallbacks callbacks;
};

// Engine-wide hooks (all optional), on the engine thread. They may read the engine (stats,
// profile, config, backend) but must not add, abort or step.
struct AsyncEngineHooks {
  // Once, after the factory succeeded and before start() returns.
  std::function<void(Engine&)> on_ready;
  // After every successful step, before its token events are delivered.
  std::function<void(Engine&, const StepStats&)> on_step;
  // After each pass of the engine loop: arrivals admitted (or refused), cancels applied, at most
  // one step run and its events delivered. For consumers that hand events on once per step.
  std::function<void(Engine&)> after_pass;
  // Once, after the engine was destroyed and before the backend is (allocation traces).
  std::function<void(Backend&)> on_engine_destroyed;
};

struct AsyncEngineOptions {
  EngineFactory factory;
  AsyncEngineHooks hooks;
  // A step that reports a refused KV growth (StepStats::oom) fails every request in flight and
  // the engine takes no more work (benchmarks: the run ends, marked out of memory). Off: the
  // scheduler preempts and carries on (the server).
  bool fail_on_oom = false;
};

class AsyncEngine {
 public:
  explicit AsyncEngine(AsyncEngineOptions options);
  ~AsyncEngine();  // shutdown()
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Starts the engine thread and runs the factory there; returns its error, if any (the thread
  // has then ended). Call once.
  Status start();

  // Queues requests; they reach the engine together on its next pass. Returns once queued: the
  // engine's own refusals (Engine::add_request) come back through on_finish as kRejected. Error
  // only when the engine is not running (start() failed or not called, or shutdown()).
  Status submit(std::vector<Submission> batch);
  Status submit(GenerationRequest request, RequestCallbacks callbacks);

  // Ends a queued or running request early (kCancelled; its KV blocks are freed). Ids that are
  // neither queued nor running are ignored.
  void cancel(uint64_t id);
  // Cancels every request submitted before this call.
  void cancel_all();

  // Blocks until every submitted request has had its on_finish (or the thread has ended).
  void wait_idle();
  // The same, at most `timeout`; false when requests were still in flight.
  bool wait_idle_for(std::chrono::nanoseconds timeout);

  // Runs fn on the engine thread between two passes (no step in progress) and returns its
  // result; for what must touch the engine itself (loading a LoRA adapter into its slots).
  // Blocks until it ran; an error when the engine is not running or shuts down first. Not from
  // a callback or a hook (deadlock).
  Status call(std::function<Status(Engine&)> fn);
  // Ends the engine thread: requests still queued or running get on_finish with kShutdown, then
  // the engine and the backend are destroyed. Idempotent; not from a callback.
  void shutdown();

  // Snapshots, safe from any thread after start(). stats(): as of the engine's last pass (each
  // step's before its token events are delivered). profile(): as of start() and of the last
  // time the engine became idle or failed — so after wait_idle() it covers every step.
  EngineStats stats() const;
  EngineProfile profile() const;

 private:
  struct Live {
    RequestCallbacks callbacks;
    int prompt_tokens = 0;
    int output_tokens = 0;
    bool cancelling = false;
  };

  // Engine thread.
  void run(std::promise<Status>& ready);
  void loop();
  void admit(std::vector<Submission>& arrivals, size_t cancel_first,
             std::vector<uint64_t>& cancels);
  void step();
  void fail_live(RequestEndKind kind, const std::string& error);
  void finish_orphans();
  void finish_live(std::unordered_map<uint64_t, Live>::iterator it, RequestEnd end);
  void finish_unadmitted(uint64_t id, RequestCallbacks& callbacks, const RequestEnd& end);
  void snapshot(bool with_profile);

  AsyncEngineOptions options_;
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable wake_;      // the engine thread waits on it
  std::condition_variable idle_;      // wait_idle() waits on it
  std::vector<Submission> arrivals_;  // guarded by mu_
  std::vector<uint64_t> cancels_;     // guarded by mu_
  struct Call {
    std::function<Status(Engine&)> fn;
    std::promise<Status> done;
  };
  std::vector<Call> calls_;   // call(): run at the start of the next pass; guarded by mu_
  size_t cancel_first_ = 0;   // cancel_all(): the first arrivals_ to cancel; guarded by mu_
  bool cancel_live_ = false;  // cancel_all(): cancel everything running; guarded by mu_
  bool stop_ = false;         // guarded by mu_
  bool running_ = false;      // guarded by mu_
  int in_flight_ = 0;         // submitted, on_finish not yet returned; guarded by mu_
  EngineStats stats_;         // guarded by mu_
  EngineProfile profile_;     // guarded by mu_

  // Engine thread only.
  EngineInstance instance_;
  std::unordered_map<uint64_t, Live> live_;  // accepted by the engine, not finished
  bool broken_ = false;
  std::string broken_message_;
};

}  // namespace ib
