// The clients of a --num-clients run start each measured run together: client I of N, before
// run K, leaves run-K.I in the shared sync directory (the parent's clients/.sync; a shared
// filesystem under Slurm, where the results land too) and waits until all N are there. Without it
// a client whose process started late (a loaded host, a slow srun task) ran its share after the
// others had finished theirs, and the aggregate concurrency was less than --max-concurrency.
#pragma once

#include <atomic>
#include <filesystem>

#include "core/result.h"

namespace ib {

// The sync directory's name under the parent's clients/ directory.
inline constexpr const char* kClientSyncDir = ".sync";

class ClientSync {
 public:
  // timeout_ms: how long a client waits for the others before failing the run (a client that
  // crashed leaves no marker; one that failed in order leaves failed.I and the others stop).
  ClientSync(std::filesystem::path dir, int index, int count, int64_t timeout_ms = 600'000);
  ClientSync(const ClientSync&) = delete;
  ClientSync& operator=(const ClientSync&) = delete;
  // A client that leaves without done() (an error) leaves failed.I, so the others stop waiting.
  ~ClientSync();

  // Blocks until every client reached run `run`; returns at once (Ok) when stop is set.
  Status before_run(int run, const std::atomic<bool>* stop);
  void done() { done_ = true; }

 private:
  std::filesystem::path dir_;
  int index_;
  int count_;
  int64_t timeout_ms_;
  bool done_ = false;
};

}  // namespace ib
