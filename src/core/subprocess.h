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
// Whether `name` is an executable file on PATH.
bool on_path(const std::string& name);

}  // namespace ib
