// Kernel switches: the environment variables that select a backend's kernels (IB_PDL, IB_FUSED,
// ...). The one list of their names, accepted values and defaults; the setting a backend reports
// it used (result.json "kernel_switches"); the variables the environment sets (`inferbench env`).
// No CUDA here: the CUDA backend reads the list, the CPU backend reads none of it.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"

namespace ib {

struct KernelSwitchSpec {
  std::string_view name;           // the environment variable
  std::string_view backend;        // the device kind that reads it ("cuda")
  std::string_view default_value;  // what the backend uses when it is unset
  int64_t min = 0;                 // integer switches: the accepted range
  int64_t max = 0;
  std::string_view words;  // non-empty: the accepted values instead ("0|1|gemv")
  std::string_view meaning;
};

// Every kernel switch, in a fixed order.
std::span<const KernelSwitchSpec> kernel_switch_specs();
// nullptr for a name that is not a kernel switch.
const KernelSwitchSpec* find_kernel_switch(std::string_view name);

// One switch as a backend used it.
struct KernelSwitchSetting {
  std::string value;      // the effective value; when !applies, the environment's text
  bool from_env = false;  // set in the environment ("env"), else the backend's default
  bool applies = true;    // false: set in the environment, but this backend does not read it
};
using KernelSwitches = std::map<std::string, KernelSwitchSetting>;  // by variable name

// The switches read by `backend` ("cuda") that the environment sets: name -> value. A value the
// switch does not accept is a user error naming the variable and what it accepts.
Result<std::map<std::string, std::string>> read_kernel_switch_env(std::string_view backend);

// What a backend that reads no switch reports: the known switches the environment sets (values
// unchecked), each marked as not applying. Empty when none is set.
KernelSwitches unapplied_kernel_switches();

// A backend's report names exactly the switches of its kind: aborts (IB_ASSERT) on a name that is
// not in the list or on a switch of that kind left out, so no switch goes unrecorded.
void check_kernel_switch_report(const KernelSwitches& switches, std::string_view backend);

// The IB_* environment variables that are not kernel switches (a misspelt switch, say), sorted.
std::vector<std::string> unknown_ib_variables();

// {"IB_PDL": {"value": "0", "source": "default", "applies": true}, ...}; source "env" or
// "default".
nlohmann::json kernel_switches_json(const KernelSwitches& switches);

}  // namespace ib
