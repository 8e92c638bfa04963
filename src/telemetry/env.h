// The environment fingerprint: what produced a result (inferbench build, OS, CPU, memory, GPU and
// driver where present, the IB_* variables set). Printed by `inferbench env` and stored in every
// result.json as "env".
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace ib {

// Never fails: a field that cannot be read is null. "gpu" is null without NVML or devices.
// "ib_variables": every IB_* variable set, name -> value, kernel switch or not.
nlohmann::json environment_fingerprint();

// Human-readable lines of the fingerprint, for `inferbench env`.
std::string format_environment(const nlohmann::json& env);
// The kernel-switch lines of it: every switch with the value the environment sets (or its
// default) and the backend that reads it, then the IB_* variables that are not switches.
std::string format_kernel_switches(const nlohmann::json& ib_variables);

// Parsers, exposed for tests: PRETTY_NAME from /etc/os-release text; "model name" and the number
// of "processor" entries from /proc/cpuinfo text; MemTotal (bytes) from /proc/meminfo text.
std::string parse_os_pretty_name(const std::string& os_release);
std::string parse_cpu_model(const std::string& cpuinfo);
int parse_cpu_count(const std::string& cpuinfo);

}  // namespace ib
