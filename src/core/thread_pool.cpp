#include "core/thread_pool.h"

#include <algorithm>

namespace ib {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, int64_t min_chunk,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t max_chunks = std::max<int64_t>(1, n / min_chunk);
  const int64_t chunks = std::min<int64_t>(max_chunks, static_cast<int64_t>(size()) * 4);
  if (chunks <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  const int64_t chunk = (n + chunks - 1) / chunks;
  {
    std::lock_guard lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    next_chunk_ = 0;
    num_chunks_ = (n + chunk - 1) / chunk;
    chunks_done_ = 0;
    ++generation_;
  }
  cv_work_.notify_all();
  // The calling thread works too.
  for (;;) {
    int64_t c;
    {
      std::lock_guard lock(mu_);
      if (next_chunk_ >= num_chunks_) break;
      c = next_chunk_++;
    }
    fn(c * chunk, std::min(n, (c + 1) * chunk));
    std::lock_guard lock(mu_);
    ++chunks_done_;
  }
  std::unique_lock lock(mu_);
  cv_done_.wait(lock, [&] { return chunks_done_ == num_chunks_; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(int /*index*/) {
  uint64_t seen = 0;
  std::unique_lock lock(mu_);
  for (;;) {
    cv_work_.wait(lock, [&] { return stop_ || (generation_ != seen && job_ != nullptr); });
    if (stop_) return;
    seen = generation_;
    while (job_ != nullptr && next_chunk_ < num_chunks_) {
      const int64_t c = next_chunk_++;
      const auto* fn = job_;
      const int64_t n = job_n_;
      const int64_t chunk = job_chunk_;
      lock.unlock();
      (*fn)(c * chunk, std::min(n, (c + 1) * chunk));
      lock.lock();
      if (++chunks_done_ == num_chunks_) cv_done_.notify_all();
    }
  }
}

}  // namespace ib
