// AsyncEngine on the tiny CPU engine: streaming order and timestamps, cancel (one, all, from a
// callback), concurrent submitters, shutdown with work in flight, the engine's refusals, OOM.
// Synchronisation is by condition variables with generous bounds, never by sleeping; where a
// test needs the engine at a known point, a callback holds the engine thread there.
#include "engine/async_engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <ostream>
#include <thread>

#include "core/clock.h"
#include "engine/detail/engine_test_support.h"

namespace ib {

// Readable failures: gtest prints the kind's name.
void PrintTo(RequestEndKind kind, std::ostream* os) {
  *os << request_end_kind_name(kind);
}

namespace {

using testing::greedy_request;
using testing::tiny_config;
using namespace std::chrono_literals;

constexpr auto kBound = 120s;  // generous: a loaded 2-core machine

EngineFactory tiny_factory(EngineConfig config = {}, ModelConfig model = tiny_config(),
                           std::function<void(Backend&, Engine&)> prepare = {}) {
  return [=]() -> Result<EngineInstance> {
    auto e = testing::make_engine(model, config);
    if (prepare) prepare(*e.backend, *e.engine);
    return EngineInstance{std::move(e.backend), std::move(e.engine)};
  };
}

std::vector<int32_t> prompt(uint64_t id, int length) {
  std::vector<int32_t> p;
  for (int i = 0; i < length; ++i) p.push_back(3 + (i * 7 + static_cast<int>(id)) % 90);
  return p;
}

// Collects every request's callbacks (they arrive on the engine thread).
struct Recorder {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::vector<TokenEvent>> tokens;
  std::map<uint64_t, RequestEnd> ends;
  int callbacks_after_end = 0;

  RequestCallbacks callbacks() {
    RequestCallbacks cb;
    cb.on_token = [this](const TokenEvent& ev) {
      std::lock_guard lock(mu);
      if (ends.count(ev.request_id)) ++callbacks_after_end;
      tokens[ev.request_id].push_back(ev);
      cv.notify_all();
    };
    cb.on_finish = [this](uint64_t id, const RequestEnd& end) {
      std::lock_guard lock(mu);
      if (ends.count(id)) ++callbacks_after_end;
      ends[id] = end;
      cv.notify_all();
    };
    return cb;
  }
  bool wait_for_ends(size_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, kBound, [&] { return ends.size() >= n; });
  }
};

// Holds the engine thread inside a callback until the test releases it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false;
  bool open = false;

  void hold() {  // engine thread
    std::unique_lock lock(mu);
    entered = true;
    cv.notify_all();
    EXPECT_TRUE(cv.wait_for(lock, kBound, [&] { return open; })) << "the test never released";
  }
  bool wait_entered() {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, kBound, [&] { return entered; });
  }
  void release() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
};

AsyncEngineOptions options(EngineFactory factory) {
  AsyncEngineOptions o;
  o.factory = std::move(factory);
  return o;
}

TEST(AsyncEngine, StreamsEachRequestsTokensInOrderWithEngineTimestamps) {
  std::vector<GenerationRequest> requests;
  for (uint64_t id = 0; id < 3; ++id) {
    requests.push_back(
        greedy_request(id, prompt(id, 5 + static_cast<int>(id)), 4 + static_cast<int>(id)));
  }
  // The same requests on a plain engine with the same weights: the tokens to expect.
  auto plain = testing::make_engine(tiny_config(), EngineConfig{});
  for (const auto& r : requests) ASSERT_TRUE(plain.engine->add_request(r).ok());
  const auto expected = testing::run_to_completion(*plain.engine);

  Recorder rec;
  int steps_seen = 0;
  AsyncEngineOptions o = options(tiny_factory());
  o.hooks.on_step = [&](Engine&, const StepStats&) { ++steps_seen; };
  AsyncEngine engine(std::move(o));
  ASSERT_TRUE(engine.start().ok());
  const int64_t before = now_ns();
  std::vector<Submission> batch;
  for (const auto& r : requests) batch.push_back({r, rec.callbacks()});
  ASSERT_TRUE(engine.submit(std::move(batch)).ok());
  ASSERT_TRUE(engine.wait_idle_for(kBound));
  const int64_t after = now_ns();

  std::lock_guard lock(rec.mu);
  ASSERT_EQ(rec.ends.size(), 3u);
  for (uint64_t id = 0; id < 3; ++id) {
    const auto& evs = rec.tokens[id];
    const RequestEnd& end = rec.ends[id];
    EXPECT_EQ(end.kind, RequestEndKind::kFinished);
    EXPECT_EQ(end.finish, FinishReason::kLength);
    EXPECT_TRUE(end.error.empty());
    EXPECT_EQ(end.prompt_tokens, 5 + static_cast<int>(id));
    EXPECT_EQ(end.output_tokens, 4 + static_cast<int>(id));
    ASSERT_EQ(evs.size(), 4u + id);
    for (size_t k = 0; k < evs.size(); ++k) {
      EXPECT_EQ(evs[k].output_index, static_cast<int>(k));
      EXPECT_EQ(evs[k].token, expected.at(id).tokens[k]) << "request " << id << " token " << k;
      EXPECT_EQ(evs[k].finish, k + 1 == evs.size() ? FinishReason::kLength : FinishReason::kNone);
      EXPECT_GE(evs[k].time_ns, before);
      EXPECT_LE(evs[k].time_ns, after);
      if (k > 0) {
        EXPECT_GE(evs[k].time_ns, evs[k - 1].time_ns);
      }
    }
    EXPECT_EQ(end.time_ns, evs.back().time_ns);
  }
  EXPECT_EQ(rec.callbacks_after_end, 0);
  // The snapshots cover every step once the engine is idle.
  const EngineStats s = engine.stats();
  const EngineProfile p = engine.profile();
  EXPECT_EQ(s.steps, steps_seen);
  EXPECT_EQ(p.decode.steps + p.prefill.steps, s.steps);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.num_running + s.num_waiting, 0);
}

TEST(AsyncEngine, CancelMidStreamEndsAbortedAndFreesTheKvBlocks) {
  Recorder rec;
  Gate gate;
  AsyncEngine engine(options(tiny_factory()));
  ASSERT_TRUE(engine.start().ok());
  RequestCallbacks held = rec.callbacks();
  held.on_token = [&, inner = held.on_token](const TokenEvent& ev) {
    inner(ev);
    if (ev.output_index == 2) gate.hold();  // the third token: mid-stream
  };
  ASSERT_TRUE(engine.submit(greedy_request(1, prompt(1, 30), 200), held).ok());
  ASSERT_TRUE(engine.submit(greedy_request(2, prompt(2, 8), 20), rec.callbacks()).ok());
  ASSERT_TRUE(gate.wait_entered());
  EXPECT_GT(engine.stats().kv_blocks_used, 0);
  engine.cancel(1);   // from the test's thread, while the engine is held mid-step
  engine.cancel(99);  // unknown ids are ignored
  gate.release();
  ASSERT_TRUE(engine.wait_idle_for(kBound));

  std::lock_guard lock(rec.mu);
  const RequestEnd& cancelled = rec.ends.at(1);
  EXPECT_EQ(cancelled.kind, RequestEndKind::kCancelled);
  EXPECT_EQ(cancelled.finish, FinishReason::kAborted);
  EXPECT_EQ(cancelled.output_tokens, 3);  // the engine took the cancel on its next pass
  EXPECT_EQ(static_cast<int>(rec.tokens[1].size()), cancelled.output_tokens);
  EXPECT_GE(cancelled.time_ns, rec.tokens[1].back().time_ns);
  EXPECT_EQ(rec.ends.at(2).kind, RequestEndKind::kFinished);  // the other one is untouched
  EXPECT_EQ(rec.tokens[2].size(), 20u);
  EXPECT_EQ(rec.callbacks_after_end, 0);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

TEST(AsyncEngine, CancelFromACallbackStopsTheStreamThere) {
  Recorder rec;
  AsyncEngine engine(options(tiny_factory()));
  ASSERT_TRUE(engine.start().ok());
  RequestCallbacks cb = rec.callbacks();
  cb.on_token = [&, inner = cb.on_token](const TokenEvent& ev) {
    inner(ev);
    if (ev.output_index == 4) engine.cancel(ev.request_id);
  };
  ASSERT_TRUE(engine.submit(greedy_request(5, prompt(5, 10), 200), cb).ok());
  ASSERT_TRUE(engine.wait_idle_for(kBound));
  std::lock_guard lock(rec.mu);
  EXPECT_EQ(rec.ends.at(5).kind, RequestEndKind::kCancelled);
  EXPECT_EQ(rec.ends.at(5).output_tokens, 5);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

TEST(AsyncEngine, CancelAllTakesWhatCameBeforeItAndNothingAfter) {
  Recorder rec;
  Gate gate;
  AsyncEngine engine(options(tiny_factory()));
  ASSERT_TRUE(engine.start().ok());
  RequestCallbacks held = rec.callbacks();
  held.on_token = [&, inner = held.on_token](const TokenEvent& ev) {
    inner(ev);
    if (ev.output_index == 0) gate.hold();
  };
  ASSERT_TRUE(engine.submit(greedy_request(1, prompt(1, 8), 200), held).ok());
  ASSERT_TRUE(gate.wait_entered());
  // The engine is held: 2 stays queued, cancel_all() covers 1 (running) and 2 (queued), not 3.
  ASSERT_TRUE(engine.submit(greedy_request(2, prompt(2, 8), 200), rec.callbacks()).ok());
  engine.cancel_all();
  ASSERT_TRUE(engine.submit(greedy_request(3, prompt(3, 8), 6), rec.callbacks()).ok());
  gate.release();
  ASSERT_TRUE(engine.wait_idle_for(kBound));
  std::lock_guard lock(rec.mu);
  EXPECT_EQ(rec.ends.at(1).kind, RequestEndKind::kCancelled);
  EXPECT_EQ(rec.ends.at(1).output_tokens, 1);
  EXPECT_EQ(rec.ends.at(2).kind, RequestEndKind::kCancelled);
  EXPECT_EQ(rec.ends.at(2).prompt_tokens, 0);  // never reached the engine
  EXPECT_EQ(rec.tokens.count(2), 0u);
  EXPECT_EQ(rec.ends.at(3).kind, RequestEndKind::kFinished);
  EXPECT_EQ(rec.ends.at(3).output_tokens, 6);
}

TEST(AsyncEngine, ConcurrentSubmittersEachGetTheirOwnStreams) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 6;
  Recorder rec;
  EngineConfig config;
  config.max_num_seqs = 8;  // some wait while others run
  AsyncEngine engine(options(tiny_factory(config)));
  ASSERT_TRUE(engine.start().ok());
  std::vector<std::thread> submitters;
  for (int t = 0; t < kThreads; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const auto id = static_cast<uint64_t>(t * kPerThread + i);
        EXPECT_TRUE(
            engine.submit(greedy_request(id, prompt(id, 4 + i), 3 + (i + t) % 5), rec.callbacks())
                .ok());
      }
    });
  }
  for (auto& th : submitters) th.join();
  ASSERT_TRUE(engine.wait_idle_for(kBound));
  std::lock_guard lock(rec.mu);
  ASSERT_EQ(rec.ends.size(), static_cast<size_t>(kThreads * kPerThread));
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      const auto id = static_cast<uint64_t>(t * kPerThread + i);
      const RequestEnd& end = rec.ends.at(id);
      EXPECT_EQ(end.kind, RequestEndKind::kFinished) << id << ": " << end.error;
      EXPECT_EQ(end.output_tokens, 3 + (i + t) % 5);
      const auto& evs = rec.tokens[id];
      ASSERT_EQ(static_cast<int>(evs.size()), end.output_tokens);
      for (size_t k = 0; k < evs.size(); ++k) {
        EXPECT_EQ(evs[k].request_id, id);
        EXPECT_EQ(evs[k].output_index, static_cast<int>(k));
      }
    }
  }
  EXPECT_EQ(rec.callbacks_after_end, 0);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

TEST(AsyncEngine, ShutdownEndsEveryRequestInFlightOrQueued) {
  Recorder rec;
  Gate gate;
  bool backend_seen = false;
  ModelConfig model = tiny_config();
  model.max_position_embeddings = 4096;  // long requests: seconds of work left at shutdown
  EngineConfig config;
  config.max_num_seqs = 4;  // a small KV pool for the long context
  AsyncEngineOptions o = options(tiny_factory(config, model));
  o.hooks.on_engine_destroyed = [&](Backend&) { backend_seen = true; };
  AsyncEngine engine(std::move(o));
  ASSERT_TRUE(engine.start().ok());
  RequestCallbacks held = rec.callbacks();
  held.on_token = [&, inner = held.on_token](const TokenEvent& ev) {
    inner(ev);
    if (ev.output_index == 0) gate.hold();
  };
  ASSERT_TRUE(engine.submit(greedy_request(1, prompt(1, 8), 4000), held).ok());
  for (uint64_t id = 2; id <= 3; ++id) {
    ASSERT_TRUE(engine.submit(greedy_request(id, prompt(id, 8), 4000), rec.callbacks()).ok());
  }
  ASSERT_TRUE(gate.wait_entered());
  gate.release();
  engine.shutdown();
  EXPECT_TRUE(backend_seen);
  EXPECT_FALSE(engine.submit(greedy_request(9, prompt(9, 4), 2), rec.callbacks()).ok());
  engine.wait_idle();  // returns at once: the thread has ended
  std::lock_guard lock(rec.mu);
  ASSERT_EQ(rec.ends.size(), 3u);
  for (const auto& [id, end] : rec.ends) {
    EXPECT_EQ(end.kind, RequestEndKind::kShutdown) << id;
    EXPECT_FALSE(end.error.empty());
    EXPECT_EQ(end.output_tokens, static_cast<int>(rec.tokens[id].size()));
  }
  EXPECT_EQ(rec.callbacks_after_end, 0);
}

TEST(AsyncEngine, TheEnginesRefusalsReachTheCaller) {
  Recorder rec;
  Recorder duplicate;
  AsyncEngine engine(options(tiny_factory()));
  ASSERT_TRUE(engine.start().ok());
  std::vector<Submission> batch;
  batch.push_back({greedy_request(1, prompt(1, 8), 30), rec.callbacks()});
  batch.push_back({greedy_request(2, {}, 4), rec.callbacks()});               // empty prompt
  batch.push_back({greedy_request(3, prompt(3, 250), 50), rec.callbacks()});  // > max_model_len
  batch.push_back({greedy_request(4, {5, 101}, 4), rec.callbacks()});         // outside the vocab
  batch.push_back({greedy_request(1, prompt(1, 8), 4), duplicate.callbacks()});  // 1 is live
  ASSERT_TRUE(engine.submit(std::move(batch)).ok());
  ASSERT_TRUE(engine.wait_idle_for(kBound));
  std::lock_guard lock(rec.mu);
  for (uint64_t id : {2, 3, 4}) {
    const RequestEnd& end = rec.ends.at(id);
    EXPECT_EQ(end.kind, RequestEndKind::kRejected) << id;
    EXPECT_FALSE(end.error.empty()) << id;
    EXPECT_EQ(end.prompt_tokens, 0);
    EXPECT_EQ(rec.tokens.count(id), 0u);
  }
  EXPECT_NE(rec.ends.at(3).error.find("max_model_len"), std::string::npos) << rec.ends.at(3).error;
  // The duplicate was refused without disturbing the live request with its id.
  std::lock_guard lock_duplicate(duplicate.mu);
  EXPECT_EQ(duplicate.ends.at(1).kind, RequestEndKind::kRejected);
  EXPECT_NE(duplicate.ends.at(1).error.find("in use"), std::string::npos);
  EXPECT_TRUE(duplicate.tokens.empty());
  EXPECT_EQ(rec.ends.at(1).kind, RequestEndKind::kFinished);
  EXPECT_EQ(rec.tokens[1].size(), 30u);
  EXPECT_EQ(rec.callbacks_after_end, 0);
}

TEST(AsyncEngine, AFactoryErrorFailsStartAndSubmitIsRefused) {
  AsyncEngine engine(
      options([]() -> Result<EngineInstance> { return user_error("no such model"); }));
  const Status st = engine.start();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, "no such model");
  Recorder rec;
  EXPECT_FALSE(engine.submit(greedy_request(1, prompt(1, 4), 2), rec.callbacks()).ok());
  engine.wait_idle();
  engine.shutdown();
}

// call() runs on the engine's thread, between passes, and returns what the function returned;
// after shutdown it is refused.
TEST(AsyncEngine, CallRunsOnTheEngineThread) {
  std::thread::id engine_thread;
  AsyncEngineOptions o = options(tiny_factory());
  o.hooks.on_ready = [&](Engine&) { engine_thread = std::this_thread::get_id(); };
  AsyncEngine engine(std::move(o));
  ASSERT_TRUE(engine.start().ok());
  std::thread::id ran_on;
  const Status ok = engine.call([&](Engine& e) {
    ran_on = std::this_thread::get_id();
    return e.has_unfinished() ? user_error("busy") : Status(Ok{});
  });
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ran_on, engine_thread);
  const Status refused = engine.call([](Engine& e) { return e.remove_lora("none"); });
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("is not loaded"), std::string::npos);
  engine.shutdown();
  EXPECT_FALSE(engine.call([](Engine&) -> Status { return Ok{}; }).ok());
}

TEST(AsyncEngine, OutOfMemoryFailsTheRequestsInFlightWhenAsked) {
  EngineConfig config;
  config.block_size = 4;
  config.use_graphs = false;
  config.kv_growth = KvGrowth::kOnDemand;
  config.kv_growth_min_blocks = 1;
  // Room for 10 blocks: four prompts of 3 blocks each cannot all grow into the pool.
  auto cap = [](Backend& backend, Engine& e) {
    const EngineStats s = e.stats();
    backend.memory().set_limit_bytes(s.memory.allocated_bytes +
                                     (10 - s.kv_blocks_total) * s.kv_block_bytes);
  };
  Recorder rec;
  AsyncEngineOptions o = options(tiny_factory(config, tiny_config(), cap));
  o.fail_on_oom = true;
  AsyncEngine engine(std::move(o));
  ASSERT_TRUE(engine.start().ok());
  std::vector<Submission> batch;
  for (uint64_t id = 0; id < 4; ++id) {
    batch.push_back({greedy_request(id, prompt(id, 11), 10), rec.callbacks()});
  }
  ASSERT_TRUE(engine.submit(std::move(batch)).ok());
  ASSERT_TRUE(engine.wait_idle_for(kBound));
  ASSERT_TRUE(engine.submit(greedy_request(7, prompt(7, 4), 2), rec.callbacks()).ok());
  ASSERT_TRUE(engine.wait_idle_for(kBound));
  std::lock_guard lock(rec.mu);
  int failed = 0;
  for (uint64_t id = 0; id < 4; ++id) {
    const RequestEnd& end = rec.ends.at(id);
    if (end.kind == RequestEndKind::kFailed) {
      ++failed;
      EXPECT_NE(end.error.find("out of memory"), std::string::npos) << end.error;
    }
  }
  EXPECT_GT(failed, 0);
  EXPECT_EQ(rec.ends.at(7).kind, RequestEndKind::kUnavailable);
  EXPECT_NE(rec.ends.at(7).error.find("out of memory"), std::string::npos);
  const EngineStats s = engine.stats();
  EXPECT_TRUE(s.oom);
  EXPECT_EQ(s.kv_blocks_used, 0);  // the failed requests' blocks were freed
}

}  // namespace
}  // namespace ib
