// `inferbench run --num-clients N` (orchestrate.h): N client processes, each a whole
// `inferbench run` over its slice of the workload, started together on one clock origin (here,
// or as the tasks of one srun step); their requests.jsonl records merged, request by request,
// into one result.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iostream>
#include <thread>

#include <fmt/format.h>

#include "backend/kernel_switches.h"
#include "core/clock.h"
#include "core/fs.h"
#include "core/subprocess.h"
#include "orchestrate/detail/client_sync.h"
#include "orchestrate/detail/run_report.h"
#include "report/result_dir.h"
#include "suite/slurm.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Client {
  fs::path dir;
  fs::path log;
  int exit_code = 0;
};

std::string log_tail(const fs::path& log) {
  auto text = read_file(log);
  if (!text.ok()) return "(no log)";
  const std::string& s = *text;
  return s.substr(s.size() > 600 ? s.size() - 600 : 0);
}

// The started clients: their processes (one per client here; one srun for all of them under
// Slurm) and the signal that stops them keeping what they measured.
struct Launch {
  std::vector<int> pids;
  int stop_signal = SIGINT;
  fs::path srun_log;  // Slurm: srun's own messages (a refused step says why here)
};

void stop_started(const Launch& launch) {
  for (int pid : launch.pids) signal_process(pid, launch.stop_signal);
  for (int pid : launch.pids) wait_process(pid);
}

// Client i here: the shared arguments, its slice, the monotonic origin and its directory.
Result<Launch> start_local_clients(const RunPlan& plan, std::vector<Client>& clients,
                                   int64_t origin_ns) {
  const int n = static_cast<int>(clients.size());
  Launch launch;
  for (int i = 0; i < n; ++i) {
    Client& c = clients[static_cast<size_t>(i)];
    std::vector<std::string> argv = plan.client_argv;
    for (std::string a :
         {std::string("--client-slice"), fmt::format("{}/{}", i, n),
          std::string("--clock-origin-ns"), std::to_string(origin_ns),
          std::string("--client-sync-dir"), (c.dir.parent_path() / kClientSyncDir).string(),
          std::string("--result-dir"), c.dir.string()}) {
      argv.push_back(std::move(a));
    }
    auto pid = start_process(argv, c.log.string());
    if (!pid.ok()) {
      stop_started(launch);
      return pid.error();
    }
    launch.pids.push_back(*pid);
  }
  return launch;
}

// The clients as the N tasks of one srun step: task I (SLURM_PROCID) runs client I with the
// same arguments as start_local_clients gives it, its log clients/client-I.log (srun's %t), and
// the origin on the wall clock (its host's monotonic clock is its own). A stop reaches the tasks
// through srun as SIGUSR1 (suite/slurm.h), on which they stop as on SIGINT.
Result<Launch> start_slurm_clients(const RunPlan& plan, const fs::path& clients_dir, int n,
                                   int64_t origin_unix_ns) {
  SlurmStep step;
  step.job_name = "inferbench-clients";
  step.ntasks = n;
  step.output = (clients_dir / "client-%t.log").string();
  step.partition = plan.slurm_clients->partition;
  step.extra = plan.slurm_clients->extra;
  step.command = plan.client_argv;
  step.command.insert(step.command.end(),
                      {"--clock-origin-unix-ns", std::to_string(origin_unix_ns),
                       "--client-sync-dir", (clients_dir / kClientSyncDir).string()});
  step.task_args = {"--client-slice", fmt::format("{}/{}", kSlurmTaskRank, n), "--result-dir",
                    (clients_dir / fmt::format("client-{}", kSlurmTaskRank)).string()};
  const std::vector<std::string> argv = srun_argv(step);
  Launch launch;
  launch.stop_signal = kSlurmStepStopSignal;  // srun passes it on (SIGTERM: it kills the tasks)
  launch.srun_log = clients_dir / "srun.log";
  IB_ASSIGN_OR_RETURN(const int pid, start_process(argv, launch.srun_log.string()));
  launch.pids.push_back(pid);
  return launch;
}

// Waits for every process; the first stop request is passed on to them (each client keeps what
// it measured and exits 130). Their exit statuses, in order.
std::vector<int> wait_all(const Launch& launch, const std::atomic<bool>& stop) {
  std::atomic<bool> done{false};
  std::thread forward([&] {
    while (!done.load()) {
      if (stop.load()) {
        for (int pid : launch.pids) signal_process(pid, launch.stop_signal);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::vector<int> codes;
  for (int pid : launch.pids) codes.push_back(wait_process(pid));
  done = true;
  forward.join();
  return codes;
}

// A client's records, their ids made unique (client i of n: id * n + i); prompt_index already
// is the request's index in the whole workload (the slice keeps each request's id).
Result<std::vector<RequestRecord>> client_records(const Client& c, int index, int count,
                                                  int64_t origin_ns) {
  std::ifstream in(c.dir / kRequestsJsonl);
  if (!in) {
    return runtime_error(fmt::format("client {} wrote no {} (exit {}); its log {}: {}", index,
                                     (c.dir / kRequestsJsonl).string(), c.exit_code, c.log.string(),
                                     log_tail(c.log)));
  }
  std::vector<RequestRecord> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    IB_ASSIGN_OR_RETURN(RequestRecord r, parse_request_json_line(line, origin_ns));
    r.id = r.id * static_cast<uint64_t>(count) + static_cast<uint64_t>(index);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

int64_t unix_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t client_clock_origin_ns(const RunConfig& config) {
  if (config.clock_origin_ns) return *config.clock_origin_ns;
  if (config.clock_origin_unix_ns) return now_ns() - (unix_now_ns() - *config.clock_origin_unix_ns);
  return now_ns();
}

Result<Outcome> execute_distributed_run(const RunPlan& plan, const PluginRegistry& registry,
                                        const std::atomic<bool>& stop) {
  const int n = plan.num_clients;
  IB_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<ReportSink>> sinks, make_report_sinks(registry));
  IB_TRY(create_result_dir(plan.result_dir, plan.overwrite));
  std::error_code ec;
  // Absolute: Slurm tasks may start in another directory (or on another host, sharing the path).
  const fs::path clients_dir = fs::absolute(plan.result_dir, ec) / "clients";
  if (plan.overwrite) fs::remove_all(clients_dir, ec);  // a previous run's clients
  // Where the clients meet before each run: emptied, since markers of an earlier run would
  // let them through at once.
  const fs::path sync_dir = clients_dir / kClientSyncDir;
  fs::remove_all(sync_dir, ec);
  fs::create_directories(sync_dir, ec);
  if (ec)
    return runtime_error(fmt::format("cannot create {}: {}", sync_dir.string(), ec.message()));

  // Time zero for every client: their records land on one clock (CLOCK_MONOTONIC is per host;
  // Slurm tasks get the origin on the wall clock).
  const int64_t origin_ns = now_ns();
  const int64_t origin_unix_ns = unix_now_ns();
  std::vector<Client> clients(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    Client& c = clients[static_cast<size_t>(i)];
    c.dir = clients_dir / fmt::format("client-{}", i);
    c.log = clients_dir / fmt::format("client-{}.log", i);
  }
  IB_ASSIGN_OR_RETURN(const Launch launch,
                      plan.slurm_clients ? start_slurm_clients(plan, clients_dir, n, origin_unix_ns)
                                         : start_local_clients(plan, clients, origin_ns));
  std::fprintf(stderr,
               "inferbench: %d client %s, %s split between them; their logs and results in %s\n", n,
               plan.slurm_clients ? "tasks (srun)" : "processes", plan.load_description.c_str(),
               clients_dir.string().c_str());
  const std::vector<int> codes = wait_all(launch, stop);
  fs::remove_all(sync_dir, ec);
  for (int i = 0; i < n; ++i) {
    clients[static_cast<size_t>(i)].exit_code =
        codes[plan.slurm_clients ? 0 : static_cast<size_t>(i)];
  }
  // A step Slurm refused (or srun that failed) started no client: srun's message says why.
  std::error_code exists_ec;
  if (plan.slurm_clients && codes[0] != 0 &&
      !fs::exists(clients[0].dir / kRequestsJsonl, exists_ec)) {
    return runtime_error(fmt::format("srun failed (exit {}); its messages ({}): {}", codes[0],
                                     launch.srun_log.string(), log_tail(launch.srun_log)));
  }

  // Merge: run k of the result is run k of every client; what any client did not complete
  // (an interrupt) is the partial run.
  BenchmarkRecords merged;
  std::vector<std::vector<RequestRecord>> per_client;
  json client_reports = json::array();
  size_t complete_runs = static_cast<size_t>(plan.runner.runs);
  bool interrupted = false;
  for (int i = 0; i < n; ++i) {
    const Client& c = clients[static_cast<size_t>(i)];
    if (c.exit_code != 0 && c.exit_code != 1 && c.exit_code != 130) {
      return runtime_error(fmt::format("client {} failed (exit {}); its log {}: {}", i, c.exit_code,
                                       c.log.string(), log_tail(c.log)));
    }
    IB_ASSIGN_OR_RETURN(std::vector<RequestRecord> records, client_records(c, i, n, origin_ns));
    per_client.push_back(std::move(records));
    const auto text = read_file(c.dir / kResultJson);
    const json result = text.ok() ? json::parse(*text, nullptr, false) : json();
    if (!result.is_object()) {
      return runtime_error(fmt::format("client {} wrote no readable {}; its log {}: {}", i,
                                       kResultJson, c.log.string(), log_tail(c.log)));
    }
    interrupted = interrupted || result.value("interrupted", false);
    complete_runs = std::min(complete_runs, result.value("num_runs", size_t{0}));
    json engine = result.value("engine", json::object());
    engine["client_index"] = i;
    engine["result_dir"] = c.dir.string();
    client_reports.push_back(std::move(engine));
  }
  merged.interrupted = interrupted;
  merged.runs.resize(complete_runs);
  for (auto& records : per_client) {
    for (RequestRecord& r : records) {
      if (r.run == kWarmupRun) {
        merged.warmup.push_back(std::move(r));
      } else if (static_cast<size_t>(r.run) < complete_runs) {
        merged.runs[static_cast<size_t>(r.run)].push_back(std::move(r));
      } else {
        merged.partial_run.push_back(std::move(r));
      }
    }
  }
  auto by_end = [](const RequestRecord& a, const RequestRecord& b) {
    return a.t_end_ns < b.t_end_ns;
  };
  std::sort(merged.warmup.begin(), merged.warmup.end(), by_end);
  for (auto& run : merged.runs) std::sort(run.begin(), run.end(), by_end);

  BenchmarkReport report = report_header(plan);
  bool client_bound = false;
  for (const json& e : client_reports) {
    client_bound = client_bound || e.value("client", json::object()).value("client_bound", false);
  }
  report.engine = {{"target", plan.backend},
                   {"num_clients", n},
                   {"client_launcher", plan.slurm_clients ? "slurm" : "local"},
                   {"client_bound", client_bound},
                   {"clients", client_reports}};
  report.kernel_switches = kernel_switches_json(unapplied_kernel_switches());
  add_results(report, merged);
  report.footnotes.push_back(
      fmt::format("{} client processes; each one's own latencies and overhead: {}/client-N/ "
                  "(engine.clients in {}).",
                  n, clients_dir.string(), kResultJson));
  report.footnotes.push_back(fmt::format("Results: {}/ ({}, {}, {}).", plan.result_dir.string(),
                                         kResultJson, kRequestsJsonl, kSummaryCsv));

  const SinkContext context{plan.result_dir, &std::cout, origin_ns};
  for (auto& s : sinks) IB_TRY(s->begin(context));
  for (const RequestRecord& r : merged.warmup) {
    for (auto& s : sinks) IB_TRY(s->on_record(r));
  }
  for (const auto& run : merged.runs) {
    for (const RequestRecord& r : run) {
      for (auto& s : sinks) IB_TRY(s->on_record(r));
    }
  }
  for (const RequestRecord& r : merged.partial_run) {
    for (auto& s : sinks) IB_TRY(s->on_record(r));
  }
  for (auto& s : sinks) IB_TRY(s->finish(report));
  std::fprintf(stderr, "inferbench: results in %s\n", plan.result_dir.string().c_str());
  if (interrupted) return Outcome::kInterrupted;
  for (const auto& run : merged.runs) {
    for (const RequestRecord& r : run) {
      if (r.ok) return Outcome::kOk;
    }
  }
  std::fprintf(stderr,
               "inferbench: error: every measured request failed; see the clients' logs in %s\n",
               clients_dir.string().c_str());
  return Outcome::kFailed;
}

}  // namespace ib
