// ClientSync: markers in a shared directory (client_sync.h).
#include "orchestrate/detail/client_sync.h"

#include <chrono>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "core/fs.h"

namespace ib {

namespace fs = std::filesystem;

ClientSync::ClientSync(fs::path dir, int index, int count, int64_t timeout_ms)
    : dir_(std::move(dir)), index_(index), count_(count), timeout_ms_(timeout_ms) {}

ClientSync::~ClientSync() {
  if (!done_) (void)write_file_atomic(dir_ / fmt::format("failed.{}", index_), "");
}

Status ClientSync::before_run(int run, const std::atomic<bool>* stop) {
  if (Status st = write_file_atomic(dir_ / fmt::format("run-{}.{}", run, index_), ""); !st.ok()) {
    return runtime_error(fmt::format("cannot write to the clients' sync directory {}: {}",
                                     dir_.string(), st.error().message));
  }
  const auto start = std::chrono::steady_clock::now();
  for (int next = 0;;) {
    // The markers are only ever added: each client's is looked for until it is there.
    std::error_code ec;
    while (next < count_ && fs::exists(dir_ / fmt::format("run-{}.{}", run, next), ec)) ++next;
    if (next == count_) return Ok{};
    if (stop != nullptr && stop->load()) return Ok{};
    for (int i = 0; i < count_; ++i) {
      if (fs::exists(dir_ / fmt::format("failed.{}", i), ec)) {
        return runtime_error(fmt::format(
            "client {} failed before run {}: this client stops too (its log says why)", i, run));
      }
    }
    const auto waited_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now() - start)
                               .count();
    if (waited_ms > timeout_ms_) {
      return runtime_error(fmt::format(
          "client {} did not reach run {} within {} s of this one: did it crash? (its log "
          "beside its result directory says)",
          next, run, timeout_ms_ / 1000));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace ib
