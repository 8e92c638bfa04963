// run_command and on_path (subprocess.h) on POSIX: fork, execvp, a pipe for the output.
#include "core/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>

namespace ib {
namespace {

std::vector<char*> c_args(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  return args;
}

// In a forked child: runs args with stdout and stderr on output_fd; when that fails, its errno
// goes to status_fd and the child exits 127.
[[noreturn]] void exec_child(const std::vector<char*>& args, int output_fd, int status_fd) {
  ::dup2(output_fd, STDOUT_FILENO);
  ::dup2(output_fd, STDERR_FILENO);
  if (output_fd > STDERR_FILENO) ::close(output_fd);
  ::execvp(args[0], args.data());
  const int err = errno;
  (void)!::write(status_fd, &err, sizeof err);
  ::_exit(127);
}

}  // namespace

Result<CommandOutput> run_command(const std::vector<std::string>& argv) {
  if (argv.empty()) return runtime_error("run_command: no program given");
  int out[2];
  int status_pipe[2];  // carries errno when execvp fails; closed on exec
  if (::pipe(out) != 0 || ::pipe2(status_pipe, O_CLOEXEC) != 0) {
    return runtime_error("cannot run " + argv[0] + ": pipe: " + std::strerror(errno));
  }
  const std::vector<char*> args = c_args(argv);
  const pid_t pid = ::fork();
  if (pid < 0) {
    return runtime_error("cannot run " + argv[0] + ": fork: " + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(out[0]);
    ::close(status_pipe[0]);
    exec_child(args, out[1], status_pipe[1]);
  }
  ::close(out[1]);
  ::close(status_pipe[1]);
  CommandOutput result;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(out[0], buffer, sizeof buffer);
    if (n > 0) {
      result.output.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(out[0]);
  int exec_errno = 0;
  const ssize_t got = ::read(status_pipe[0], &exec_errno, sizeof exec_errno);
  ::close(status_pipe[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (got == static_cast<ssize_t>(sizeof exec_errno)) {
    return runtime_error("cannot run " + argv[0] + ": " + std::strerror(exec_errno));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

Result<int> start_process(const std::vector<std::string>& argv, const std::string& log_path) {
  if (argv.empty()) return runtime_error("start_process: no program given");
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) {
    return runtime_error("cannot run " + argv[0] + ": cannot open its log " + log_path + ": " +
                         std::strerror(errno));
  }
  int status_pipe[2];  // carries errno when execvp fails; closed on exec
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
    ::close(log);
    return runtime_error("cannot run " + argv[0] + ": pipe: " + std::strerror(errno));
  }
  const std::vector<char*> args = c_args(argv);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log);
    return runtime_error("cannot run " + argv[0] + ": fork: " + std::strerror(errno));
  }
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the parent's watcher thread blocks them
    ::close(status_pipe[0]);
    exec_child(args, log, status_pipe[1]);
  }
  ::close(log);
  ::close(status_pipe[1]);
  int exec_errno = 0;
  const ssize_t got = ::read(status_pipe[0], &exec_errno, sizeof exec_errno);
  ::close(status_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof exec_errno)) {
    wait_process(pid);
    return runtime_error("cannot run " + argv[0] + ": " + std::strerror(exec_errno));
  }
  return static_cast<int>(pid);
}

int wait_process(int pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 127;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void signal_process(int pid, int signal_number) {
  ::kill(pid, signal_number);
}

bool on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::string_view rest = path;
  while (true) {
    const size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    const std::filesystem::path candidate = std::filesystem::path(dir.empty() ? "." : dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) {
      return true;
    }
    if (colon == std::string_view::npos) return false;
    rest = rest.substr(colon + 1);
  }
}

}  // namespace ib
