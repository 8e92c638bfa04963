#include "telemetry/env.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "backend/kernel_switches.h"
#include "core/build_info.h"
#include "core/fs.h"
#include "telemetry/collector.h"
#include "telemetry/detail/nvml.h"

namespace ib {
namespace {

using nlohmann::json;

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(" \t\"");
  const auto last = s.find_last_not_of(" \t\"\r");
  return first == std::string::npos ? "" : s.substr(first, last - first + 1);
}

std::string value_after(const std::string& line, char sep) {
  const auto pos = line.find(sep);
  return pos == std::string::npos ? "" : trim(line.substr(pos + 1));
}

json or_null(const std::string& s) {
  return s.empty() ? json(nullptr) : json(s);
}

json gpu_section() {
  const auto nvml = detail::query_nvml();
  if (!nvml) return nullptr;
  json devices = json::array();
  for (const auto& d : nvml->devices) {
    devices.push_back(json{{"index", d.index},
                           {"name", d.name},
                           {"uuid", d.uuid},
                           {"memory_total_bytes", d.memory_total_bytes}});
  }
  // Each pair of GPUs: the PCIe path as `nvidia-smi topo -m` names it, and NVLink (null: unknown).
  json links = json::array();
  for (const auto& l : nvml->links) {
    links.push_back(json{{"gpus", {l.a, l.b}},
                         {"pcie", or_null(l.pcie)},
                         {"nvlink", l.nvlink ? json(*l.nvlink) : json(nullptr)}});
  }
  return json{{"driver_version", nvml->driver_version},
              {"cuda_driver_version", fmt::format("{}.{}", nvml->cuda_driver_version / 1000,
                                                  nvml->cuda_driver_version % 1000 / 10)},
              {"devices", devices},
              {"links", links}};
}

}  // namespace

std::string parse_os_pretty_name(const std::string& os_release) {
  std::istringstream in(os_release);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("PRETTY_NAME=", 0) == 0) return value_after(line, '=');
  }
  return "";
}

std::string parse_cpu_model(const std::string& cpuinfo) {
  std::istringstream in(cpuinfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return value_after(line, ':');
  }
  return "";
}

int parse_cpu_count(const std::string& cpuinfo) {
  std::istringstream in(cpuinfo);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.rfind("processor", 0) == 0 && line.find(':') != std::string::npos) ++n;
  }
  return n;
}

json environment_fingerprint() {
  const BuildInfo b = build_info();
  json j;
  j["inferbench"] = json{{"version", b.version},       {"git_sha", b.git_sha},
                         {"git_dirty", b.git_dirty},   {"compiler", b.compiler},
                         {"build_type", b.build_type}, {"cuda_enabled", b.cuda_enabled}};
  utsname u{};
  const bool have_uname = ::uname(&u) == 0;
  auto os_release = read_file("/etc/os-release");
  j["os"] = json{
      {"name", os_release.ok() ? or_null(parse_os_pretty_name(*os_release)) : json(nullptr)},
      {"kernel", have_uname ? json(fmt::format("{} {}", u.sysname, u.release)) : json(nullptr)},
      {"machine", have_uname ? json(u.machine) : json(nullptr)},
      {"hostname", have_uname ? json(u.nodename) : json(nullptr)}};
  auto cpuinfo = read_file("/proc/cpuinfo");
  j["cpu"] = json{{"model", cpuinfo.ok() ? or_null(parse_cpu_model(*cpuinfo)) : json(nullptr)},
                  {"logical_cores", static_cast<int>(std::thread::hardware_concurrency())},
                  {"cores_online", static_cast<int64_t>(::sysconf(_SC_NPROCESSORS_ONLN))}};
  auto meminfo = read_file("/proc/meminfo");
  const auto total = meminfo.ok() ? parse_status_kb_field(*meminfo, "MemTotal:") : std::nullopt;
  j["memory"] = json{{"total_bytes", total ? json(*total) : json(nullptr)}};
  j["gpu"] = gpu_section();
  json ib_variables = json::object();
  for (const auto& [name, setting] : unapplied_kernel_switches())
    ib_variables[name] = setting.value;
  for (const auto& name : unknown_ib_variables()) {
    const char* value = std::getenv(name.c_str());
    ib_variables[name] = value != nullptr ? value : "";
  }
  j["ib_variables"] = std::move(ib_variables);
  return j;
}

std::string format_environment(const json& env) {
  auto text = [](const json& v) { return v.is_null() ? std::string("unknown") : v.dump(); };
  auto str = [&](const json& v) { return v.is_string() ? v.get<std::string>() : text(v); };
  const json& ib = env["inferbench"];
  std::string out;
  out += fmt::format("inferbench  {} (git {}{}), {}, {}, CUDA backend {}\n", str(ib["version"]),
                     str(ib["git_sha"]), ib["git_dirty"].get<bool>() ? ", dirty" : "",
                     str(ib["compiler"]), str(ib["build_type"]),
                     ib["cuda_enabled"].get<bool>() ? "on" : "off");
  out += fmt::format("os          {} ({}, {})\n", str(env["os"]["name"]), str(env["os"]["kernel"]),
                     str(env["os"]["machine"]));
  out += fmt::format("cpu         {} ({} logical cores)\n", str(env["cpu"]["model"]),
                     str(env["cpu"]["logical_cores"]));
  const json& mem = env["memory"]["total_bytes"];
  out += fmt::format("memory      {}\n",
                     mem.is_null() ? std::string("unknown")
                                   : fmt::format("{:.1f} GiB", mem.get<double>() / (1 << 30)));
  if (env["gpu"].is_null()) {
    out += "gpu         none (no NVML driver library or no device)\n";
  } else {
    for (const auto& d : env["gpu"]["devices"]) {
      out += fmt::format("gpu {}       {}, {:.1f} GiB, driver {}, CUDA {}\n", d["index"].get<int>(),
                         str(d["name"]), d["memory_total_bytes"].get<double>() / (1 << 30),
                         str(env["gpu"]["driver_version"]), str(env["gpu"]["cuda_driver_version"]));
    }
  }
  out += format_kernel_switches(env.value("ib_variables", json::object()));
  return out;
}

std::string format_kernel_switches(const json& ib_variables) {
  std::string out =
      "kernel switches (what a run used is in its result.json, \"kernel_switches\")\n";
  for (const auto& spec : kernel_switch_specs()) {
    const std::string name(spec.name);
    const bool set = ib_variables.contains(name);
    out +=
        fmt::format("  {:<26} {:<14} {} [{}] {}\n", name,
                    set ? ib_variables[name].get<std::string>() : std::string(spec.default_value),
                    set ? "(env)     " : "(default) ", spec.backend, spec.meaning);
  }
  for (const auto& [name, value] : ib_variables.items()) {
    if (find_kernel_switch(name) == nullptr) {
      out += fmt::format("  {:<26} {:<14} not a kernel switch: selects nothing\n", name,
                         value.get<std::string>());
    }
  }
  return out;
}

}  // namespace ib
