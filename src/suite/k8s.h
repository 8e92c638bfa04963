// A suite as Kubernetes Indexed Jobs (`inferbench suite FILE --executor k8s`): the manifests, as
// text. Each Job's completion index picks one suite entry; its pod runs `inferbench suite
// /suite/suite.yaml --array-task I` with the result directory on a shared volume (a
// PersistentVolumeClaim), so `--collect` (a Job of its own, or run anywhere the claim is mounted)
// merges the entries' states as for Slurm.
#pragma once

#include <string>
#include <vector>

namespace ib {

struct K8sJob {
  std::string name;                // the Job's name (a DNS label)
  std::string namespace_name;      // metadata.namespace
  std::string image;               // the container image holding inferbench
  std::string config_map;          // the ConfigMap holding the suite file as suite.yaml
  std::string claim;               // the PersistentVolumeClaim mounted at result_dir
  std::string result_dir;          // absolute, inside the container
  std::vector<int> indices;        // the suite entries, by completion index
  std::string gpu_resource;        // e.g. "nvidia.com/gpu" ("" for CPU entries)
  int gpus = 0;                    // per pod
  int active_deadline_s = 0;       // per pod (0: none)
  std::vector<std::string> extra;  // further `inferbench suite` flags (--override ...)
  // The collect step instead: one pod (no indices, no GPU) running `inferbench suite
  // /suite/suite.yaml --collect` on the claim once the entries' Jobs have finished.
  bool collect = false;
};

// A DNS-1123 label from text: lower case, [a-z0-9-], at most 63 characters, never empty.
std::string k8s_name(const std::string& text);
// The ConfigMap holding the suite file (data key suite.yaml).
std::string k8s_config_map_yaml(const std::string& name, const std::string& namespace_name,
                                const std::string& suite_text);
// The Indexed Job of `job`, or its collect Job.
std::string k8s_job_yaml(const K8sJob& job);

}  // namespace ib
