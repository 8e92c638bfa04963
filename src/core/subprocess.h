// Running an external program and collecting what it prints (its stdout and stderr together),
// for the scheduler commands a suite submits through (sbatch, scontrol).
#pragma once

#include <string>
#include <vector>

#include "core/result.h"

namespace ib {

struct CommandOutput {
  int exit_code = 0;   // the program's exit status; 128 + N when signal N ended it
  std::string output;  // stdout and stderr, interleaved as written
};

// argv[0] is looked up on PATH. A program that cannot be started (not found, not executable) is
// a runtime error naming it; a non-zero exit is not an error (see exit_code).
Result<CommandOutput> run_command(const std::vector<std::string>& argv);
// Starts a program in the background, its stdout and stderr appended to log_path (created when
// missing) and every signal unblocked; returns its pid for wait_process. A program that cannot be
// started is a runtime error naming it (and the log says why).
Result<int> start_process(const std::vector<std::string>& argv, const std::string& log_path);
// Blocks until the process exits; its exit status, 128 + N when signal N ended it.
int wait_process(int pid);
// Sends it a signal (SIGINT: an inferbench run stops and keeps what it measured).
void signal_process(int pid, int signal_number);

// Whether `name` is an executable file on PATH.
bool on_path(const std::string& name);

}  // namespace ib
