#include "suite/k8s.h"

#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

namespace ib {
namespace {

TEST(K8s, NamesAreDnsLabels) {
  EXPECT_EQ(k8s_name("inferbench-Seed Table_v2"), "inferbench-seed-table-v2");
  EXPECT_EQ(k8s_name("--x--"), "x");
  EXPECT_EQ(k8s_name("!!!"), "inferbench");
  EXPECT_EQ(k8s_name(std::string(100, 'a')).size(), 63u);
}

// A Job of suite "s" in namespace bench, its results on the claim "results" at /shared/r.
K8sJob job_named(const std::string& name) {
  K8sJob j;
  j.name = name;
  j.namespace_name = "bench";
  j.image = "reg/ib:1";
  j.config_map = "inferbench-s-suite";
  j.claim = "results";
  j.result_dir = "/shared/r";
  return j;
}

TEST(K8s, JobRunsEachCompletionIndexsEntryWithItsGpus) {
  K8sJob j = job_named("inferbench-s-gpu");
  j.indices = {0, 2, 5};
  j.gpu_resource = "nvidia.com/gpu";
  j.gpus = 1;
  j.extra = {"--override", "num_prompts=16"};
  const YAML::Node job = YAML::Load(k8s_job_yaml(j));
  EXPECT_EQ(job["kind"].as<std::string>(), "Job");
  EXPECT_EQ(job["metadata"]["namespace"].as<std::string>(), "bench");
  EXPECT_EQ(job["spec"]["completionMode"].as<std::string>(), "Indexed");
  EXPECT_EQ(job["spec"]["completions"].as<int>(), 3);
  const YAML::Node pod = job["spec"]["template"]["spec"];
  EXPECT_EQ(pod["restartPolicy"].as<std::string>(), "Never");
  const YAML::Node c = pod["containers"][0];
  EXPECT_EQ(c["image"].as<std::string>(), "reg/ib:1");
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"].as<int>(), 1);
  const std::string script = c["args"][0].as<std::string>();
  EXPECT_NE(script.find("set -- 0 2 5\n"), std::string::npos) << script;
  EXPECT_NE(script.find("shift \"$JOB_COMPLETION_INDEX\""), std::string::npos) << script;
  EXPECT_NE(script.find("--result-dir /shared/r --override num_prompts=16 --array-task \"$1\""),
            std::string::npos)
      << script;
  EXPECT_EQ(pod["volumes"][1]["persistentVolumeClaim"]["claimName"].as<std::string>(), "results");
  EXPECT_EQ(c["volumeMounts"][1]["mountPath"].as<std::string>(), "/shared/r");
  j.gpus = 0;
  EXPECT_FALSE(
      YAML::Load(k8s_job_yaml(j))["spec"]["template"]["spec"]["containers"][0]["resources"]);
  const YAML::Node cm = YAML::Load(k8s_config_map_yaml("m", "bench", "name: s\nentries: []\n"));
  EXPECT_EQ(cm["data"]["suite.yaml"].as<std::string>(), "name: s\nentries: []\n");
}

TEST(K8s, CollectJobIsOnePodMergingOnTheClaim) {
  K8sJob j = job_named("inferbench-s-collect");
  j.extra = {"--override", "runs=1"};
  j.collect = true;
  const YAML::Node job = YAML::Load(k8s_job_yaml(j));
  EXPECT_FALSE(job["spec"]["completionMode"]);
  EXPECT_FALSE(job["spec"]["backoffLimitPerIndex"]);
  EXPECT_EQ(job["spec"]["backoffLimit"].as<int>(), 0);
  const YAML::Node c = job["spec"]["template"]["spec"]["containers"][0];
  EXPECT_FALSE(c["resources"]);
  const std::string script = c["args"][0].as<std::string>();
  EXPECT_EQ(script,
            "set -eu\nexec inferbench suite /suite/suite.yaml --result-dir /shared/r --override "
            "runs=1 --collect\n");
  EXPECT_EQ(c["volumeMounts"][1]["mountPath"].as<std::string>(), "/shared/r");
  EXPECT_EQ(job["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"].as<std::string>(),
            "inferbench-s-suite");
}

}  // namespace
}  // namespace ib
