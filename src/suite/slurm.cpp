// The Slurm job array of a suite: script text and the parsing of sbatch and scontrol (slurm.h).
#include "suite/slurm.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

namespace ib {
namespace {

bool parse_int(std::string_view text, int& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

// The value of KEY=VALUE in a one-line scontrol record (values end at a space).
std::string field(const std::string& line, const std::string& key) {
  size_t at = 0;
  while ((at = line.find(key + "=", at)) != std::string::npos) {
    if (at == 0 || line[at - 1] == ' ') {
      const size_t start = at + key.size() + 1;
      const size_t end = line.find(' ', start);
      return line.substr(start, end == std::string::npos ? std::string::npos : end - start);
    }
    at += key.size();
  }
  return "";
}

}  // namespace

std::string slurm_array_spec(std::vector<int> indices) {
  std::sort(indices.begin(), indices.end());
  indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
  std::string out;
  for (size_t i = 0; i < indices.size();) {
    size_t j = i;
    while (j + 1 < indices.size() && indices[j + 1] == indices[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j == i ? std::to_string(indices[i]) : fmt::format("{}-{}", indices[i], indices[j]);
    i = j + 1;
  }
  return out;
}

std::string shell_quote(const std::string& word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           std::string_view("@%_+=:,./-").find(c) != std::string_view::npos;
  });
  if (plain) return word;
  std::string out = "'";
  for (const char c : word) {
    if (c == '\'') {
      out.append("'\\''");
    } else {
      out.push_back(c);
    }
  }
  out.push_back('\'');
  return out;
}

std::string slurm_batch_script(const SlurmArray& a) {
  std::string s = "#!/bin/bash\n";
  s += "# Written by `inferbench suite --executor slurm`: one array task per suite entry.\n";
  const auto option = [&](const char* name, const std::string& value) {
    s += fmt::format("#SBATCH --{}={}\n", name, value);
  };
  option("job-name", shell_quote(a.job_name));
  option("array", slurm_array_spec(a.indices));
  option("output", shell_quote(fmt::format("{}/%A_%a.out", a.log_dir)));
  option("chdir", shell_quote(a.workdir));
  option("time", std::to_string(a.time_limit_min));
  option("nodes", "1");
  option("ntasks", "1");
  if (!a.partition.empty()) option("partition", shell_quote(a.partition));
  if (!a.gres.empty()) option("gres", shell_quote(a.gres));
  for (const auto& e : a.extra) s += fmt::format("#SBATCH {}\n", e);
  s += "set -u\nexec";
  for (const auto& w : a.command) s += fmt::format(" {}", shell_quote(w));
  s += " \"$SLURM_ARRAY_TASK_ID\"\n";
  return s;
}

std::vector<std::string> srun_argv(const SlurmStep& step) {
  std::vector<std::string> argv = {"srun", fmt::format("--ntasks={}", step.ntasks),
                                   "--job-name=" + step.job_name, "--kill-on-bad-exit=0"};
  if (!step.output.empty()) argv.push_back("--output=" + step.output);
  if (!step.partition.empty()) argv.push_back("--partition=" + step.partition);
  argv.insert(argv.end(), step.extra.begin(), step.extra.end());
  std::string script = "exec \"$0\" \"$@\"";
  const std::string_view rank = kSlurmTaskRank;
  for (const std::string& arg : step.task_args) {
    script += ' ';
    for (size_t from = 0;;) {
      const size_t at = arg.find(rank, from);
      const std::string part = arg.substr(from, at == std::string::npos ? at : at - from);
      if (!part.empty()) script += shell_quote(part);
      if (at == std::string::npos) break;
      script += "\"$SLURM_PROCID\"";
      from = at + rank.size();
    }
  }
  argv.insert(argv.end(), {"/bin/sh", "-c", script});
  argv.insert(argv.end(), step.command.begin(), step.command.end());
  return argv;
}

Result<std::string> parse_sbatch_job_id(const std::string& output) {
  std::string line = output;
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' '))
    line.pop_back();
  const size_t nl = line.rfind('\n');
  if (nl != std::string::npos) line = line.substr(nl + 1);
  const std::string id = line.substr(0, line.find(';'));
  int value = 0;
  if (id.empty() || !parse_int(id, value) || value < 0) {
    return runtime_error(fmt::format("sbatch printed no job id: '{}'", output));
  }
  return id;
}

std::map<int, SlurmTaskState> parse_scontrol_tasks(const std::string& text) {
  std::map<int, SlurmTaskState> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::string task = field(line, "ArrayTaskId");
    if (task.empty()) continue;
    SlurmTaskState st{field(line, "JobState"), field(line, "ExitCode"), field(line, "Reason")};
    // A pending remainder is one record: "ArrayTaskId=3-5,7" (with "%limit" possibly after).
    std::string list = task.substr(0, task.find('%'));
    std::istringstream parts(list);
    for (std::string part; std::getline(parts, part, ',');) {
      const size_t dash = part.find('-');
      int first = 0, last = 0;
      if (dash == std::string::npos) {
        if (!parse_int(part, first)) continue;
        last = first;
      } else if (!parse_int(part.substr(0, dash), first) ||
                 !parse_int(part.substr(dash + 1), last)) {
        continue;
      }
      for (int t = first; t <= last && t - first < 100000; ++t) out[t] = st;
    }
  }
  return out;
}

bool slurm_state_active(const std::string& state) {
  for (const char* s :
       {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
        "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"}) {
    if (state == s) return true;
  }
  return false;
}

}  // namespace ib
