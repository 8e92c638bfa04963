// Kubernetes manifests of a suite (k8s.h), written with yaml-cpp's emitter.
#include "suite/k8s.h"

#include <cctype>

#include <yaml-cpp/yaml.h>

#include "suite/slurm.h"

namespace ib {

std::string k8s_name(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0) {
      out.push_back(static_cast<char>(std::tolower(u)));
    } else if (!out.empty() && out.back() != '-') {
      out.push_back('-');
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.size() > 63) out.resize(63);
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "inferbench" : out;
}

std::string k8s_config_map_yaml(const std::string& name, const std::string& namespace_name,
                                const std::string& suite_text) {
  YAML::Emitter y;
  y << YAML::BeginMap << YAML::Key << "apiVersion" << YAML::Value << "v1" << YAML::Key << "kind"
    << YAML::Value << "ConfigMap" << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap
    << YAML::Key << "name" << YAML::Value << name << YAML::Key << "namespace" << YAML::Value
    << namespace_name << YAML::EndMap << YAML::Key << "data" << YAML::Value << YAML::BeginMap
    << YAML::Key << "suite.yaml" << YAML::Value << YAML::Literal << suite_text << YAML::EndMap
    << YAML::EndMap;
  std::string out = y.c_str();
  out.push_back('\n');
  return out;
}

std::string k8s_job_yaml(const K8sJob& j) {
  // The pod's command: completion index I runs entry indices[I]; the collect pod merges them.
  std::string script = "set -eu\n";
  if (!j.collect) {
    script.append("set --");
    for (const int i : j.indices) script.append(" ").append(std::to_string(i));
    script.append("\nshift \"$JOB_COMPLETION_INDEX\"\n");
  }
  script.append("exec inferbench suite /suite/suite.yaml");
  script.append(" --result-dir ").append(shell_quote(j.result_dir));
  for (const auto& e : j.extra) script.append(" ").append(shell_quote(e));
  script.append(j.collect ? " --collect\n" : " --array-task \"$1\"\n");
  const int n = j.collect ? 1 : static_cast<int>(j.indices.size());
  YAML::Emitter y;
  y << YAML::BeginMap;
  y << YAML::Key << "apiVersion" << YAML::Value << "batch/v1";
  y << YAML::Key << "kind" << YAML::Value << "Job";
  y << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "name" << YAML::Value << j.name;
  y << YAML::Key << "namespace" << YAML::Value << j.namespace_name;
  y << YAML::Key << "labels" << YAML::Value << YAML::BeginMap << YAML::Key
    << "app.kubernetes.io/name" << YAML::Value << "inferbench" << YAML::EndMap;
  y << YAML::EndMap;
  y << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  if (j.collect) {
    y << YAML::Key << "backoffLimit" << YAML::Value << 0;  // a failed entry fails it: no retry
  } else {
    y << YAML::Key << "completionMode" << YAML::Value << "Indexed";
    y << YAML::Key << "completions" << YAML::Value << n;
    y << YAML::Key << "parallelism" << YAML::Value << n;
    // Each index fails on its own, never retried (Kubernetes 1.29+; older clusters drop the
    // field and retry a failed pod up to the default backoffLimit): one entry's failure stops
    // no other.
    y << YAML::Key << "backoffLimitPerIndex" << YAML::Value << 0;
  }
  y << YAML::Key << "template" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "restartPolicy" << YAML::Value << "Never";
  if (j.active_deadline_s > 0) {
    y << YAML::Key << "activeDeadlineSeconds" << YAML::Value << j.active_deadline_s;
  }
  y << YAML::Key << "containers" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  y << YAML::Key << "name" << YAML::Value << "inferbench";
  y << YAML::Key << "image" << YAML::Value << j.image;
  y << YAML::Key << "command" << YAML::Value << YAML::Flow << YAML::BeginSeq << "/bin/sh"
    << "-c" << YAML::EndSeq;
  y << YAML::Key << "args" << YAML::Value << YAML::BeginSeq << YAML::Literal << script
    << YAML::EndSeq;
  if (!j.gpu_resource.empty() && j.gpus > 0) {
    y << YAML::Key << "resources" << YAML::Value << YAML::BeginMap << YAML::Key << "limits"
      << YAML::Value << YAML::BeginMap << YAML::Key << j.gpu_resource << YAML::Value << j.gpus
      << YAML::EndMap << YAML::EndMap;
  }
  y << YAML::Key << "volumeMounts" << YAML::Value << YAML::BeginSeq;
  y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << "suite" << YAML::Key << "mountPath"
    << YAML::Value << "/suite" << YAML::Key << "readOnly" << YAML::Value << true << YAML::EndMap;
  y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << "results" << YAML::Key << "mountPath"
    << YAML::Value << j.result_dir << YAML::EndMap;
  y << YAML::EndSeq;
  y << YAML::EndMap << YAML::EndSeq;  // the container, containers
  y << YAML::Key << "volumes" << YAML::Value << YAML::BeginSeq;
  y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << "suite" << YAML::Key << "configMap"
    << YAML::Value << YAML::BeginMap << YAML::Key << "name" << YAML::Value << j.config_map
    << YAML::EndMap << YAML::EndMap;
  y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << "results" << YAML::Key
    << "persistentVolumeClaim" << YAML::Value << YAML::BeginMap << YAML::Key << "claimName"
    << YAML::Value << j.claim << YAML::EndMap << YAML::EndMap;
  y << YAML::EndSeq;
  y << YAML::EndMap << YAML::EndMap;  // pod spec, template
  y << YAML::EndMap << YAML::EndMap;  // job spec, job
  std::string out = y.c_str();
  out.push_back('\n');
  return out;
}

}  // namespace ib
