// Test support for the serve end-to-end tests: `inferbench serve` as a process on a free port
// (its port read from its startup line), other programs beside it, and a Prometheus scraping it.
#pragma once

#include <signal.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <nlohmann/json.hpp>

#include "cli/detail/e2e_support.h"

namespace ib::testing {

namespace net = boost::asio;

inline std::string text_of(const fs::path& p) {
  auto r = read_file(p);
  return r.ok() ? *r : std::string();
}

// Waits for the "serving ... on http://HOST:PORT" line and returns the port (0 on timeout).
inline uint16_t wait_for_port(const fs::path& err_file, int timeout_ms = 60000) {
  const std::regex line(R"(on http://127\.0\.0\.1:(\d+))");
  for (int waited = 0; waited < timeout_ms; waited += 20) {
    std::smatch m;
    const std::string err = text_of(err_file);
    if (std::regex_search(err, m, line)) return static_cast<uint16_t>(std::stoi(m[1]));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

inline uint16_t free_port() {
  net::io_context io;
  net::ip::tcp::acceptor a(io, {net::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

// The measured (not warm-up) records of a result directory's requests.jsonl.
inline std::vector<nlohmann::json> measured_lines(const fs::path& dir) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text_of(dir / "requests.jsonl"));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line);
    if (!j["warmup"].get<bool>()) out.push_back(std::move(j));
  }
  return out;
}

class ServeE2e : public E2e {
 protected:
  // Starts `inferbench serve` with args on a free port; returns its port.
  uint16_t start_server(std::vector<std::string> args) {
    args.insert(args.begin(), {"serve", "--port", "0"});
    const std::string n = std::to_string(++servers_started_);
    const fs::path err = root_ / ("serve" + n + ".err");
    server_ = spawn(args, root_ / ("serve" + n + ".out"), err);
    const uint16_t port = wait_for_port(err);
    EXPECT_NE(port, 0) << text_of(err);
    return port;
  }
  // A Prometheus (Debian's) scraping 127.0.0.1:target every second as job `job`: its pid and
  // the port of its query API.
  std::pair<pid_t, uint16_t> start_prometheus(uint16_t target, const std::string& job) {
    const uint16_t prom_port = free_port();
    std::ofstream(root_ / "prometheus.yml")
        << "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: " << job
        << "\n    static_configs:\n      - targets: ['127.0.0.1:" << target << "']\n";
    const pid_t pid =
        spawn_program({"prometheus", "--config.file=" + (root_ / "prometheus.yml").string(),
                       "--storage.tsdb.path=" + (root_ / "tsdb").string(),
                       "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
                      root_ / "prom.out", root_ / "prom.err");
    return {pid, prom_port};
  }
  void TearDown() override {
    if (server_ > 0) {
      ::kill(server_, SIGKILL);
      wait_exit(server_);
    }
    E2e::TearDown();
  }
  pid_t server_ = -1;
  int servers_started_ = 0;
};

}  // namespace ib::testing
