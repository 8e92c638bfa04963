#include "cli/interrupt.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>

namespace ib {

InterruptWatcher::InterruptWatcher() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGUSR1);  // what srun passes on to its tasks; Slurm's --signal warning
  pthread_sigmask(SIG_BLOCK, &set_, &previous_);
  thread_ = std::thread([this] { watch(); });
}

InterruptWatcher::~InterruptWatcher() {
  done_ = true;
  thread_.join();
  pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

void InterruptWatcher::watch() {
  const timespec poll{0, 100'000'000};  // 100 ms: how long the destructor may wait
  while (!done_) {
    siginfo_t info;
    if (sigtimedwait(&set_, &info, &poll) < 0) continue;  // EAGAIN (timeout) or EINTR
    if (interrupted_.exchange(true)) {
      constexpr char kMsg[] = "\ninferbench: interrupted twice; exiting now\n";
      (void)!::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
      std::_Exit(130);
    }
    constexpr char kMsg[] =
        "\ninferbench: interrupted; cancelling in-flight requests and writing the results "
        "(Ctrl-C again to exit at once)\n";
    (void)!::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
  }
}

}  // namespace ib
