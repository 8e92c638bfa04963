// A suite as one Slurm job array (`inferbench suite FILE --executor slurm`): the batch script,
// and the parsing of what sbatch and scontrol print; and the srun command line of a run's client
// tasks (`inferbench run --client-launcher slurm`). Pure text in and out; cli/ and orchestrate/
// run the commands.
// Each array task runs `inferbench suite FILE --array-task $SLURM_ARRAY_TASK_ID` (one entry,
// its state in DIR/<entry>/entry-state.json); `--collect` merges the tasks' states.
#pragma once

#include <csignal>
#include <map>
#include <string>
#include <vector>

#include "core/result.h"

namespace ib {

// Where a suite's Slurm files go inside its result directory: DIR/slurm/ holds the batch
// scripts, jobs.json (each submission: job id, entry indices, script) and logs/<job>_<task>.out.
inline constexpr const char* kSlurmDir = "slurm";
inline constexpr const char* kSlurmJobsJson = "jobs.json";

struct SlurmArray {
  std::string job_name;            // --job-name
  std::vector<int> indices;        // the entries' indices in the suite, the array's task ids
  std::string partition;           // --partition ("" leaves Slurm's default)
  std::string gres;                // --gres, e.g. "gpu:1" ("" none)
  int time_limit_min = 60;         // --time, minutes per task
  std::vector<std::string> extra;  // further sbatch options, each "--name=value" or "--flag"
  std::string log_dir;             // absolute; logs are log_dir/%A_%a.out
  std::string workdir;             // absolute; the task's working directory (--chdir)
  // The task's command; the script appends the task id ("$SLURM_ARRAY_TASK_ID").
  std::vector<std::string> command;
};

// Indices as Slurm's --array list: sorted, runs collapsed, e.g. {0, 1, 2, 5, 7, 8} -> "0-2,5,7-8".
std::string slurm_array_spec(std::vector<int> indices);
// A word quoted for the POSIX shell when it needs quoting.
std::string shell_quote(const std::string& word);
// The sbatch script: #SBATCH lines, then the command with the task id.
std::string slurm_batch_script(const SlurmArray& array);
// The job id `sbatch --parsable` printed ("123" or "123;cluster"); a runtime error quoting the
// output otherwise.
Result<std::string> parse_sbatch_job_id(const std::string& output);

// N tasks of one program as one job step (`srun --ntasks=N`): each task runs `command` followed
// by `task_args`, in which kSlurmTaskRank stands for the task's rank (0..N-1, $SLURM_PROCID).
inline constexpr const char* kSlurmTaskRank = "{task}";
struct SlurmStep {
  std::string job_name;                // --job-name
  int ntasks = 1;                      // --ntasks
  std::string output;                  // --output: srun's pattern, %t the task's rank
  std::string partition;               // --partition ("" leaves Slurm's default)
  std::vector<std::string> extra;      // further srun options, each "--name=value" or "--flag"
  std::vector<std::string> command;    // every task's program and arguments
  std::vector<std::string> task_args;  // then these, per task (kSlurmTaskRank replaced)
};
// The srun argv: one task failing kills no other (--kill-on-bad-exit=0); each task runs
// /bin/sh -c 'exec "$0" "$@" TASK_ARGS' COMMAND..., so COMMAND's words reach it untouched.
// Stopping: SIGINT or SIGTERM to srun cancels the step (its tasks are killed); srun passes
// kSlurmStepStopSignal on to the tasks' processes, and inferbench stops on it as on SIGINT.
inline constexpr int kSlurmStepStopSignal = SIGUSR1;
std::vector<std::string> srun_argv(const SlurmStep& step);

// A task's state as `scontrol show job -o JOBID` reports it (one line per task).
struct SlurmTaskState {
  std::string state;      // JobState: PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, ...
  std::string exit_code;  // ExitCode, "code:signal"
  std::string reason;     // Reason
};
// Keyed by ArrayTaskId; lines of other jobs and pending ranges ("ArrayTaskId=3-5") are expanded
// or skipped as Slurm writes them.
std::map<int, SlurmTaskState> parse_scontrol_tasks(const std::string& text);
// PENDING, RUNNING, CONFIGURING, COMPLETING, SUSPENDED, REQUEUED...: the task may still finish.
bool slurm_state_active(const std::string& state);

}  // namespace ib
