// `inferbench run --num-clients N` (orchestrate.h): N client processes, each a whole
// `inferbench run` over its slice of the workload, started together on one clock origin; their
// requests.jsonl records merged, request by request, into one result.
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
#include "orchestrate/detail/run_report.h"
#include "report/result_dir.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Client {
  fs::path dir;
  fs::path log;
  int pid = 0;
  int exit_code = 0;
};

std::string log_tail(const fs::path& log) {
  auto text = read_file(log);
  if (!text.ok()) return "(no log)";
  const std::string& s = *text;
  return s.substr(s.size() > 600 ? s.size() - 600 : 0);
}

// Waits for every client; the first stop request is passed on to them (SIGINT: each keeps what
// it measured and exits 130).
void wait_all(std::vector<Client>& clients, const std::atomic<bool>& stop) {
  std::atomic<bool> done{false};
  std::thread forward([&] {
    while (!done.load()) {
      if (stop.load()) {
        for (const Client& c : clients) signal_process(c.pid, SIGINT);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  for (Client& c : clients) c.exit_code = wait_process(c.pid);
  done = true;
  forward.join();
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

Result<Outcome> execute_distributed_run(const RunPlan& plan, const PluginRegistry& registry,
                                        const std::atomic<bool>& stop) {
  const int n = plan.num_clients;
  IB_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<ReportSink>> sinks, make_report_sinks(registry));
  IB_TRY(create_result_dir(plan.result_dir, plan.overwrite));
  const fs::path clients_dir = plan.result_dir / "clients";
  std::error_code ec;
  if (plan.overwrite) fs::remove_all(clients_dir, ec);  // a previous run's clients
  fs::create_directories(clients_dir, ec);
  if (ec)
    return runtime_error(fmt::format("cannot create {}: {}", clients_dir.string(), ec.message()));

  // Time zero for every client: their records land on one clock (CLOCK_MONOTONIC is per host).
  const int64_t origin_ns = now_ns();
  std::vector<Client> clients(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    Client& c = clients[static_cast<size_t>(i)];
    c.dir = clients_dir / fmt::format("client-{}", i);
    c.log = clients_dir / fmt::format("client-{}.log", i);
    std::vector<std::string> argv = plan.client_argv;
    for (std::string a : {std::string("--client-slice"), fmt::format("{}/{}", i, n),
                          std::string("--clock-origin-ns"), std::to_string(origin_ns),
                          std::string("--result-dir"), c.dir.string()}) {
      argv.push_back(std::move(a));
    }
    auto pid = start_process(argv, c.log.string());
    if (!pid.ok()) {
      for (int j = 0; j < i; ++j) signal_process(clients[static_cast<size_t>(j)].pid, SIGINT);
      for (int j = 0; j < i; ++j) wait_process(clients[static_cast<size_t>(j)].pid);
      return pid.error();
    }
    c.pid = *pid;
  }
  std::fprintf(stderr,
               "inferbench: %d client processes, %s split between them; their logs and results "
               "in %s\n",
               n, plan.load_description.c_str(), clients_dir.string().c_str());
  wait_all(clients, stop);

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
