#include "suite/slurm.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/subprocess.h"

namespace ib {
namespace {

TEST(Slurm, ArraySpecCollapsesRuns) {
  EXPECT_EQ(slurm_array_spec({5, 0, 1, 2, 8, 7}), "0-2,5,7-8");
  EXPECT_EQ(slurm_array_spec({3}), "3");
  EXPECT_EQ(slurm_array_spec({4, 4, 5}), "4-5");
  EXPECT_EQ(slurm_array_spec({}), "");
}

TEST(Slurm, ShellQuoteLeavesPlainWordsAndQuotesTheRest) {
  EXPECT_EQ(shell_quote("/shared/bench-1/x.yaml"), "/shared/bench-1/x.yaml");
  EXPECT_EQ(shell_quote("num_prompts=16"), "num_prompts=16");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("$HOME"), "'$HOME'");
}

TEST(Slurm, StepRunsTheCommandWithEachTasksRankInItsArguments) {
  SlurmStep step;
  step.job_name = "inferbench-clients";
  step.ntasks = 3;
  step.output = "/r d/clients/client-%t.log";
  step.partition = "cpu";
  step.extra = {"--nodes=2"};
  step.command = {"printf", "%s\\n", "a b", "it's"};
  step.task_args = {"--client-slice", std::string(kSlurmTaskRank) + "/3", "--result-dir",
                    "/r d/client-" + std::string(kSlurmTaskRank)};
  const std::vector<std::string> argv = srun_argv(step);
  const auto sh = std::find(argv.begin(), argv.end(), "/bin/sh");
  ASSERT_NE(sh, argv.end());
  EXPECT_EQ(std::vector<std::string>(argv.begin(), sh),
            (std::vector<std::string>{"srun", "--ntasks=3", "--job-name=inferbench-clients",
                                      "--kill-on-bad-exit=0", "--output=/r d/clients/client-%t.log",
                                      "--partition=cpu", "--nodes=2"}));
  // What task 2 runs, by the shell srun starts: the command's words as given, then its own.
  std::vector<std::string> task = {"env", "SLURM_PROCID=2"};
  task.insert(task.end(), sh, argv.end());
  const auto ran = run_command(task);
  ASSERT_TRUE(ran.ok()) << ran.error().message;
  EXPECT_EQ(ran->exit_code, 0) << ran->output;
  EXPECT_EQ(ran->output, "a b\nit's\n--client-slice\n2/3\n--result-dir\n/r d/client-2\n");
}

TEST(Slurm, BatchScriptHasTheArrayItsOptionsAndTheTaskCommand) {
  SlurmArray a;
  a.job_name = "inferbench-seed table";
  a.indices = {0, 2, 3};
  a.partition = "gpu";
  a.gres = "gpu:1";
  a.time_limit_min = 45;
  a.extra = {"--account=lab", "--exclusive"};
  a.log_dir = "/shared/r/slurm/logs";
  a.workdir = "/home/u/bench";
  a.command = {"/opt/ib/inferbench", "suite",      "/shared/s.yaml", "--result-dir",
               "/shared/r",          "--override", "num_prompts=16", "--array-task"};
  const std::string s = slurm_batch_script(a);
  EXPECT_EQ(s.rfind("#!/bin/bash\n", 0), 0u);
  for (const char* line :
       {"#SBATCH --job-name='inferbench-seed table'\n", "#SBATCH --array=0,2-3\n",
        "#SBATCH --output=/shared/r/slurm/logs/%A_%a.out\n", "#SBATCH --chdir=/home/u/bench\n",
        "#SBATCH --time=45\n", "#SBATCH --partition=gpu\n", "#SBATCH --gres=gpu:1\n",
        "#SBATCH --account=lab\n", "#SBATCH --exclusive\n",
        "exec /opt/ib/inferbench suite /shared/s.yaml --result-dir /shared/r --override "
        "num_prompts=16 --array-task \"$SLURM_ARRAY_TASK_ID\"\n"}) {
    EXPECT_NE(s.find(line), std::string::npos) << line << "\nin\n" << s;
  }
  a.partition.clear();
  a.gres.clear();
  const std::string bare = slurm_batch_script(a);
  EXPECT_EQ(bare.find("--partition"), std::string::npos);
  EXPECT_EQ(bare.find("--gres"), std::string::npos);
}

TEST(Slurm, SbatchJobIdIsParsedOrRefusedQuotingTheOutput) {
  EXPECT_EQ(*parse_sbatch_job_id("4711\n"), "4711");
  EXPECT_EQ(*parse_sbatch_job_id("4711;cluster-a\n"), "4711");
  EXPECT_EQ(*parse_sbatch_job_id("sbatch: warning: x\n12\n"), "12");
  const auto bad = parse_sbatch_job_id("sbatch: error: Invalid partition name specified\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("Invalid partition name"), std::string::npos);
}

TEST(Slurm, ScontrolTasksAreKeyedByArrayTaskId) {
  const std::string text =
      "JobId=12 ArrayJobId=10 ArrayTaskId=2 JobName=x UserId=u(0) JobState=FAILED "
      "Reason=NonZeroExitCode Dependency=(null) ExitCode=1:0 RunTime=00:00:03\n"
      "JobId=11 ArrayJobId=10 ArrayTaskId=0 JobName=x JobState=COMPLETED Reason=None "
      "ExitCode=0:0\n"
      "JobId=10 ArrayJobId=10 ArrayTaskId=4-6,9%2 JobName=x JobState=PENDING "
      "Reason=Resources ExitCode=0:0\n"
      "JobId=13 ArrayJobId=10 ArrayTaskId=1 JobName=x JobState=TIMEOUT Reason=TimeLimit "
      "ExitCode=0:15\n";
  const auto tasks = parse_scontrol_tasks(text);
  ASSERT_EQ(tasks.size(), 7u);
  EXPECT_EQ(tasks.at(2).state, "FAILED");
  EXPECT_EQ(tasks.at(2).exit_code, "1:0");
  EXPECT_EQ(tasks.at(2).reason, "NonZeroExitCode");
  EXPECT_EQ(tasks.at(0).state, "COMPLETED");
  EXPECT_EQ(tasks.at(1).state, "TIMEOUT");
  for (const int t : {4, 5, 6, 9}) EXPECT_EQ(tasks.at(t).state, "PENDING") << t;
  EXPECT_TRUE(slurm_state_active("PENDING"));
  EXPECT_TRUE(slurm_state_active("RUNNING"));
  EXPECT_FALSE(slurm_state_active("TIMEOUT"));
  EXPECT_FALSE(slurm_state_active("COMPLETED"));
  EXPECT_TRUE(parse_scontrol_tasks("slurm_load_jobs error: Invalid job id specified\n").empty());
}

}  // namespace
}  // namespace ib
