// `inferbench suite --executor k8s` (cli/detail/suite_support.h): the unfinished entries as
// Kubernetes Indexed Jobs (suite/k8s.h), written for `kubectl apply`, not applied.
#include <fmt/format.h>

#include <iostream>
#include <map>

#include "cli/commands.h"
#include "cli/detail/suite_support.h"
#include "cli/run_options.h"
#include "core/fs.h"
#include "suite/k8s.h"

namespace ib {

namespace fs = std::filesystem;

Result<int> write_suite_k8s(const SuiteFlags& flags, const SuiteSpec& spec,
                            const std::vector<SuiteEntry>& entries, const fs::path& dir,
                            const PluginRegistry& registry) {
  if (flags.k8s_image.empty() || flags.k8s_pvc.empty()) {
    return user_error(
        "--executor k8s needs --k8s-image (a container image with inferbench on its PATH) and "
        "--k8s-pvc (a PersistentVolumeClaim the pods mount at --result-dir, where the results "
        "and the states go)");
  }
  IB_ASSIGN_OR_RETURN(const auto planned, validate_entries(entries, dir, registry));
  IB_ASSIGN_OR_RETURN(const std::string suite_text, read_file(flags.file));
  IB_TRY(start_suite_state(dir, spec.name));
  std::error_code ec;
  IB_ASSIGN_OR_RETURN(const SuiteState state, merged_suite_state(dir, spec.name, entries));
  std::map<int, std::vector<int>> by_gpus;  // GPUs per pod -> entry indices
  for (size_t i = 0; i < planned.size(); ++i) {
    const SuiteEntry& e = planned[i].entry;
    if (state.done(e, flags.retry_failed)) continue;
    const auto run = parse_run_args(e.args);
    by_gpus[run.ok() && run->device == "cuda" ? 1 : 0].push_back(static_cast<int>(i));
    fs::remove(dir / e.name / kEntryStateJson, ec);  // never an earlier run's state
  }
  if (by_gpus.empty()) {
    std::cout << fmt::format(
        "every entry of {} has finished; `inferbench suite {} --result-dir {} "
        "--collect` writes the leaderboard\n",
        spec.name, flags.file, dir.string());
    return kExitOk;
  }
  const fs::path out = dir / "k8s";
  fs::create_directories(out, ec);
  if (ec) return runtime_error(fmt::format("cannot create {}: {}", out.string(), ec.message()));
  const std::string base = k8s_name("inferbench-" + spec.name);
  const std::string config_map = base + "-suite";
  IB_TRY(write_file_atomic(out / "configmap.yaml",
                           k8s_config_map_yaml(config_map, flags.k8s_namespace, suite_text)));
  std::vector<std::string> extra;
  if (!flags.model_list.empty()) extra.insert(extra.end(), {"--model-list", flags.model_list});
  for (const auto& o : flags.overrides) extra.insert(extra.end(), {"--override", o});
  // What every Job shares: namespace, image, the suite's ConfigMap, the claim and its mount.
  K8sJob common;
  common.namespace_name = flags.k8s_namespace;
  common.image = flags.k8s_image;
  common.config_map = config_map;
  common.claim = flags.k8s_pvc;
  common.result_dir = fs::absolute(dir).string();
  common.extra = extra;
  for (const auto& [gpus, indices] : by_gpus) {
    K8sJob job = common;
    job.name = k8s_name(base + (gpus > 0 ? "-gpu" : "-cpu"));
    job.indices = indices;
    job.gpu_resource = gpus > 0 ? flags.k8s_gpu_resource : "";
    job.gpus = gpus;
    const fs::path file = out / fmt::format("job-{}.yaml", gpus > 0 ? "gpu" : "cpu");
    IB_TRY(write_file_atomic(file, k8s_job_yaml(job)));
    std::cout << fmt::format("wrote {}: Indexed Job {} of {} entr{}\n", file.string(), job.name,
                             indices.size(), indices.size() == 1 ? "y" : "ies");
  }
  // The collect step: a Job of its own, in a folder of its own so that applying DIR/k8s/ does
  // not start it before the entries' Jobs have finished (Kubernetes orders no Jobs).
  K8sJob collect = common;
  collect.name = k8s_name(base + "-collect");
  collect.collect = true;
  fs::create_directories(out / "collect", ec);
  if (ec)
    return runtime_error(fmt::format("cannot create {}/collect: {}", out.string(), ec.message()));
  IB_TRY(write_file_atomic(out / "collect" / "job-collect.yaml", k8s_job_yaml(collect)));
  std::cout << fmt::format(
      "next: kubectl apply -f {0}/ ; when those Jobs have finished (kubectl get jobs -n {4} -l "
      "app.kubernetes.io/name=inferbench): kubectl apply -f {0}/collect/ (Job {5} writes the "
      "leaderboard into {2} on the claim {3}), or inferbench suite {1} --result-dir {2} "
      "--collect where the claim is mounted\n",
      out.string(), flags.file, dir.string(), flags.k8s_pvc, flags.k8s_namespace, collect.name);
  return kExitOk;
}

}  // namespace ib
