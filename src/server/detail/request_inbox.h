// Internal to server/: the hand-over from the HTTP threads to the null generator's own thread —
// new requests, aborts and the stop flag under one mutex, and a condition variable that wakes the
// generator. (The engine generator's hand-over is the AsyncEngine's.)
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "server/generator.h"

namespace ib::detail {

class RequestInbox {
 public:
  void submit(GenerationRequest request) {
    {
      std::lock_guard lock(mu_);
      incoming_.push_back(std::move(request));
    }
    wake_.notify_one();
  }
  void abort(uint64_t id) {
    {
      std::lock_guard lock(mu_);
      aborts_.push_back(id);
    }
    wake_.notify_one();
  }
  void stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_one();
  }

  // Generator thread: waits for a request, an abort or stop — at most max_wait_ns when given
  // (0: no wait, the generator has work of its own) — then moves what arrived into incoming
  // and aborts. False once stop() was called.
  bool take(std::vector<GenerationRequest>& incoming, std::vector<uint64_t>& aborts,
            std::optional<int64_t> max_wait_ns) {
    std::unique_lock lock(mu_);
    auto ready = [&] { return stop_ || !incoming_.empty() || !aborts_.empty(); };
    if (!max_wait_ns) {
      wake_.wait(lock, ready);
    } else if (*max_wait_ns > 0) {
      wake_.wait_for(lock, std::chrono::nanoseconds(*max_wait_ns), ready);
    }
    if (stop_) return false;
    incoming.swap(incoming_);
    aborts.swap(aborts_);
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable wake_;
  std::vector<GenerationRequest> incoming_;  // guarded by mu_
  std::vector<uint64_t> aborts_;             // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
};

}  // namespace ib::detail
