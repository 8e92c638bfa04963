// The kernel switches' list, their checks, the CPU backend's report and the JSON record.
#include "backend/kernel_switches.h"
#include "backend/backend_factory.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <set>
#include <string>

#include "backend/backend.h"

namespace ib {
namespace {

// Sets (or unsets) one variable for a test's scope and restores what was there before.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Every test starts from an environment without any kernel switch.
class KernelSwitchesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& spec : kernel_switch_specs()) {
      const std::string name(spec.name);
      if (const char* old = std::getenv(name.c_str())) saved_.emplace_back(name, old);
      ::unsetenv(name.c_str());
    }
  }
  void TearDown() override {
    for (const auto& spec : kernel_switch_specs()) ::unsetenv(std::string(spec.name).c_str());
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  std::vector<std::pair<std::string, std::string>> saved_;
};

TEST_F(KernelSwitchesTest, TheListHasEveryCudaSwitchOnceWithADefault) {
  std::set<std::string> names;
  for (const auto& spec : kernel_switch_specs()) {
    EXPECT_TRUE(names.insert(std::string(spec.name)).second) << spec.name;
    EXPECT_TRUE(spec.name.starts_with("IB_")) << spec.name;
    EXPECT_FALSE(spec.default_value.empty()) << spec.name;
    EXPECT_EQ(find_kernel_switch(spec.name), &spec);
  }
  for (const char* name :
       {"IB_CUDA_DEBUG_SYNC",  "IB_PDL",           "IB_FUSED",           "IB_ADD_CUBLASLT",
        "IB_MATMUL_TUNING",    "IB_ATTN_PREFETCH", "IB_CUDA_MLA",        "IB_MLA_SPLIT",
        "IB_MOE_TILES",        "IB_MOE_BALANCE",   "IB_MOE_WARPS",       "IB_MOE_WARP_RING",
        "IB_MOE_SHARED",       "IB_MOE_PDL",       "IB_MOE_WIDE",        "IB_MOE_ADD_NORM",
        "IB_GEMV_PERSIST",     "IB_GEMV_RING",     "IB_GEMV_DENSE_RING", "IB_GEMV_FUSE_QUANT",
        "IB_GEMV_STAGE_X",     "IB_QUANT_TRIGGER", "IB_QUANT_SYNC",      "IB_GEMV_STAGE_NORM",
        "IB_GEMM_M_BUCKETS",   "IB_GEMM_TUNE",     "IB_GEMV_INT4_WARPS", "IB_NORM_REGS",
        "IB_ROPE_VEC",         "IB_NORM_POST",     "IB_GGUF_WIDE",       "IB_GEMV_SWIGLU_BLOCKS",
        "IB_LORA_FUSED",       "IB_LORA_PDL",      "IB_LORA_IN_GEMV",    "IB_LORA_ATTN",
        "IB_LORA_QKV_BLOCKS",  "IB_ATTN_LEAN",     "IB_GEMV_QKV_BLOCKS", "IB_SMEM_CARVEOUT",
        "IB_MOE_GEMM",         "IB_ATTN_MMA",      "IB_QUANT_GEMM",      "IB_ATTN_MIXED",
        "IB_ATTN_MMA_PERSIST", "IB_ATTN_E4M3_F16"}) {
    EXPECT_EQ(names.count(name), 1u) << name;
  }
  EXPECT_EQ(find_kernel_switch("IB_NOT_A_SWITCH"), nullptr);
}

TEST_F(KernelSwitchesTest, ReadsTheSwitchesTheEnvironmentSets) {
  ScopedEnv pdl("IB_PDL", "1");
  ScopedEnv tuning("IB_MATMUL_TUNING", "gemv");
  auto env = read_kernel_switch_env("cuda");
  ASSERT_TRUE(env.ok()) << env.error().message;
  EXPECT_EQ(env->size(), 2u);
  EXPECT_EQ(env->at("IB_PDL"), "1");
  EXPECT_EQ(env->at("IB_MATMUL_TUNING"), "gemv");
  auto cpu = read_kernel_switch_env("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_TRUE(cpu->empty());
}

TEST_F(KernelSwitchesTest, BadValuesAreUserErrorsNamingTheVariableAndWhatItAccepts) {
  const struct {
    const char* name;
    const char* value;
    const char* accepted;
  } bad[] = {{"IB_ATTN_PREFETCH", "-1", "from 0 to"},
             {"IB_PDL", "on", "from 0 to 3"},
             {"IB_ATTN_PREFETCH", "", "integer"},
             {"IB_MATMUL_TUNING", "fast", "0, 1, 2, 3 or gemv"},
             {"IB_LORA_IN_GEMV", "2", "0, 1, 3, 4 or 5"}};
  for (const auto& b : bad) {
    ScopedEnv env(b.name, b.value);
    auto read = read_kernel_switch_env("cuda");
    ASSERT_FALSE(read.ok()) << b.name;
    EXPECT_EQ(read.error().kind, ErrorKind::kUser);
    EXPECT_NE(read.error().message.find(b.name), std::string::npos) << read.error().message;
    EXPECT_NE(read.error().message.find(b.accepted), std::string::npos) << read.error().message;
  }
}

TEST_F(KernelSwitchesTest, TheCpuBackendReportsNoneWhenNoneIsSet) {
  auto cpu = create_backend(BackendOptions{});
  ASSERT_TRUE(cpu.ok());
  EXPECT_TRUE((*cpu)->kernel_switches().empty());
  EXPECT_EQ(kernel_switches_json((*cpu)->kernel_switches()), nlohmann::json::object());
}

// A switch set for a CPU run selects nothing, but the record still shows it, marked as such;
// a CPU run does not check the value.
TEST_F(KernelSwitchesTest, TheCpuBackendRecordsSetSwitchesAsNotApplying) {
  ScopedEnv prefetch("IB_ATTN_PREFETCH", "2");
  ScopedEnv pdl("IB_PDL", "on");
  auto cpu = create_backend(BackendOptions{});
  ASSERT_TRUE(cpu.ok());
  const KernelSwitches s = (*cpu)->kernel_switches();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s.at("IB_ATTN_PREFETCH").value, "2");
  EXPECT_TRUE(s.at("IB_ATTN_PREFETCH").from_env);
  EXPECT_FALSE(s.at("IB_ATTN_PREFETCH").applies);
  EXPECT_EQ(s.at("IB_PDL").value, "on");
  const auto j = kernel_switches_json(s);
  EXPECT_EQ(j["IB_ATTN_PREFETCH"],
            (nlohmann::json{{"value", "2"}, {"source", "env"}, {"applies", false}}));
}

TEST_F(KernelSwitchesTest, TheJsonRecordNamesTheSource) {
  const KernelSwitches s{{"IB_PDL", {"0", false, true}}, {"IB_FUSED", {"0", true, true}}};
  const auto j = kernel_switches_json(s);
  EXPECT_EQ(j,
            (nlohmann::json{{"IB_PDL", {{"value", "0"}, {"source", "default"}, {"applies", true}}},
                            {"IB_FUSED", {{"value", "0"}, {"source", "env"}, {"applies", true}}}}));
}

TEST_F(KernelSwitchesTest, AReportMustNameEverySwitchOfItsBackend) {
  KernelSwitches full;
  for (const auto& spec : kernel_switch_specs()) full[std::string(spec.name)] = {"0", false, true};
  check_kernel_switch_report(full, "cuda");  // does not abort
  KernelSwitches missing = full;
  missing.erase("IB_PDL");
  EXPECT_DEATH(check_kernel_switch_report(missing, "cuda"), "left one of its kernel switches out");
  KernelSwitches unknown = full;
  unknown["IB_PDLL"] = {"1", true, true};
  EXPECT_DEATH(check_kernel_switch_report(unknown, "cuda"), "not in the list");
}

TEST_F(KernelSwitchesTest, UnknownIbVariablesAreListed) {
  ScopedEnv typo("IB_L2_PREFECH", "1");
  ScopedEnv known("IB_FUSED", "0");
  const auto unknown = unknown_ib_variables();
  EXPECT_NE(std::find(unknown.begin(), unknown.end(), "IB_L2_PREFECH"), unknown.end());
  EXPECT_EQ(std::find(unknown.begin(), unknown.end(), "IB_FUSED"), unknown.end());
}

}  // namespace
}  // namespace ib
