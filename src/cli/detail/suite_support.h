// Internal to cli/: what `inferbench suite` shares between its local run (suite_command.cpp) and
// its Slurm executor (suite_slurm.cpp).
#pragma once

#include <filesystem>
#include <vector>

#include "cli/suite_commands.h"
#include "orchestrate/orchestrate.h"
#include "suite/suite.h"

namespace ib {

// Every entry resolved as `inferbench run` would resolve it; all bad ones reported together
// (those with allow_failure are kept, to be recorded as not run).
Result<std::vector<SuiteEntryPlan>> validate_entries(const std::vector<SuiteEntry>& entries,
                                                     const std::filesystem::path& dir,
                                                     const PluginRegistry& registry);
// The suite's eval step: the entry's eval, its JSON at `json`.
Status run_entry_eval(const SuiteEntry& e, const std::filesystem::path& json);

// The suite's state as the local run and the array tasks left it: DIR's state file (or a fresh
// state) with each entry's own DIR/<entry>/entry-state.json recorded over it where its flags
// are the entry's.
Result<SuiteState> merged_suite_state(const std::filesystem::path& dir, const std::string& name,
                                      const std::vector<SuiteEntry>& entries);

// Before an executor writes into DIR: a fresh suite state there unless it holds one (or a Slurm
// submission); a non-empty directory without either is refused as the local run refuses it.
Status start_suite_state(const std::filesystem::path& dir, const std::string& name);

// --executor slurm: submits the entries not finished as Slurm job arrays (suite_slurm.cpp).
Result<int> submit_suite_slurm(const SuiteFlags& flags, const SuiteSpec& spec,
                               const std::vector<SuiteEntry>& entries,
                               const std::filesystem::path& dir, const PluginRegistry& registry);
// --executor k8s: writes the entries not finished as Kubernetes Indexed Jobs (suite_k8s.cpp).
Result<int> write_suite_k8s(const SuiteFlags& flags, const SuiteSpec& spec,
                            const std::vector<SuiteEntry>& entries,
                            const std::filesystem::path& dir, const PluginRegistry& registry);
// --array-task I: runs entry I alone, its state into DIR/<entry>/entry-state.json.
Result<int> run_suite_array_task(const SuiteFlags& flags, const SuiteSpec& spec,
                                 const std::vector<SuiteEntry>& entries,
                                 const std::filesystem::path& dir, const PluginRegistry& registry,
                                 const std::atomic<bool>& stop);
// --collect: merges the tasks' states (and Slurm's word on tasks that left none) into the suite
// state, then writes the leaderboard.
Result<int> collect_suite(const SuiteSpec& spec, const std::vector<SuiteEntry>& entries,
                          const std::filesystem::path& dir);

}  // namespace ib
