// End to end: `inferbench serve` as a process, benchmarked by `inferbench run --backend openai`
// as another; SIGTERM drains an in-flight stream; a real Prometheus server (Debian package)
// scrapes /metrics and its query API returns our series, and every panel of the shipped Grafana
// dashboard (dashboards/inferbench.json) returns data.
#include <signal.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/detail/serve_e2e_support.h"
#include "server/detail/test_support.h"

namespace ib::testing {
namespace {

using nlohmann::json;
namespace net = boost::asio;

TEST_F(ServeE2e, RunBackendOpenAiBenchmarksServeAndSigtermDrains) {
  const uint16_t port =
      start_server({"--model", "tiny-15m", "--kv-cache-memory", "64MiB", "--num-threads", "1"});
  ASSERT_NE(port, 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  for (const std::string backend : {"openai", "openai-chat"}) {
    const fs::path dir = root_ / backend;
    ASSERT_EQ(run({"run", "--backend", backend, "--base-url", url, "--model", "tiny-15m",
                   "--num-prompts", "8", "--batch-size", "4", "--input-len", "8", "--output-len",
                   "8", "--runs", "1", "--result-dir", dir.string()}),
              0)
        << err();
    const json result = json::parse(read_file(dir / "result.json").value());
    EXPECT_EQ(result["completed"], 8) << backend;
    EXPECT_EQ(result["failed"], 0) << backend;
    EXPECT_EQ(result["total_output_tokens"], 64) << backend;
    EXPECT_EQ(result["engine"]["target"], backend);
    EXPECT_EQ(result["config"]["base_url"], url);
    EXPECT_GT(result["mean_ttft_ms"].get<double>(), 0);
  }

  // A stream in flight when SIGTERM arrives still gets every token, then the server exits 0.
  net::io_context io;
  net::ip::tcp::socket socket(io);
  socket.connect({net::ip::make_address("127.0.0.1"), port});
  const std::string body = R"({"prompt": "drain me", "max_tokens": 120, "stream": true})";
  net::write(socket, net::buffer("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                 std::to_string(body.size()) + "\r\n\r\n" + body));
  std::string got;
  char buf[4096];
  while (got.find("\"text\"") == std::string::npos) {
    got.append(buf, socket.read_some(net::buffer(buf)));
  }
  ASSERT_EQ(::kill(server_, SIGTERM), 0);
  boost::system::error_code ec;
  while (!ec) got.append(buf, socket.read_some(net::buffer(buf), ec));
  EXPECT_NE(got.find("data: [DONE]"), std::string::npos);
  size_t events = 0;
  for (size_t p = got.find("\"text\""); p != std::string::npos; p = got.find("\"text\"", p + 1)) {
    ++events;
  }
  EXPECT_EQ(events, 120u);
  EXPECT_EQ(wait_exit(server_), 0);
  server_ = -1;
}

// `serve --tensor-parallel-size 2` (two CPU ranks): the server answers as one rank does, the
// same greedy completion, and a benchmark against it completes.
TEST_F(ServeE2e, TensorParallelServerAnswersAsOneRank) {
  std::map<int, std::string> text;
  for (const int ranks : {1, 2}) {
    const uint16_t port =
        start_server({"--model", "tiny-15m", "--kv-cache-memory", "64MiB", "--num-threads", "1",
                      "--tensor-parallel-size", std::to_string(ranks)});
    ASSERT_NE(port, 0);
    const HttpReply reply =
        http_call(port, "POST", "/v1/completions",
                  R"({"prompt": "once upon a time", "max_tokens": 12, "temperature": 0})");
    ASSERT_EQ(reply.status, 200) << reply.body;
    text[ranks] = json::parse(reply.body)["choices"][0]["text"].get<std::string>();
    if (ranks == 2) {
      const fs::path dir = root_ / "tp2";
      ASSERT_EQ(run({"run", "--backend", "openai", "--base-url",
                     "http://127.0.0.1:" + std::to_string(port), "--model", "tiny-15m",
                     "--num-prompts", "4", "--batch-size", "2", "--input-len", "8", "--output-len",
                     "6", "--runs", "1", "--result-dir", dir.string()}),
                0)
          << err();
      const json result = json::parse(read_file(dir / "result.json").value());
      EXPECT_EQ(result["completed"], 4);
      EXPECT_EQ(result["failed"], 0);
    }
    ASSERT_EQ(::kill(server_, SIGTERM), 0);
    EXPECT_EQ(wait_exit(server_), 0);
    server_ = -1;
  }
  EXPECT_FALSE(text[1].empty());
  EXPECT_EQ(text[2], text[1]);
}

TEST_F(ServeE2e, NullModelServesTheTokenizerOfTokenizerFlag) {
  const fs::path dir = root_ / "tok";
  fs::create_directories(dir);
  write_two_merge_tokenizer(dir / "tokenizer.json");  // "ab ab" is <s> ▁ab ▁ab
  expect_refused({"serve", "--model", "tiny-15m", "--tokenizer", dir.string()},
                 "--tokenizer applies to --model null only", root_ / "none");
  expect_refused({"serve", "--model", "null", "--tokenizer", (root_ / "missing").string()},
                 "not a directory with tokenizer.json", root_ / "none");
  const uint16_t port = start_server({"--model", "null", "--tokenizer", dir.string()});
  ASSERT_NE(port, 0);
  const auto r = http_call(port, "POST", "/tokenize", R"({"prompt": "ab ab"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["tokens"], json::array({0, 5, 5})) << r.body;
  const auto c =
      http_call(port, "POST", "/v1/completions", R"({"prompt": "ab ab", "max_tokens": 2})");
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(json::parse(c.body)["usage"]["prompt_tokens"], 3) << c.body;
}

// The most requests in flight at once: sends and ends as +1 / -1 events (an end before a send
// at the same instant).
int peak_in_flight(const std::vector<json>& lines) {
  std::vector<std::pair<int64_t, int>> events;
  for (const json& j : lines) {
    events.emplace_back(j["t_send_ns"].get<int64_t>(), 1);
    events.emplace_back(j["t_end_ns"].get<int64_t>(), -1);
  }
  std::sort(events.begin(), events.end());
  int now = 0, peak = 0;
  for (const auto& [t, d] : events) peak = std::max(peak, now += d);
  return peak;
}

TEST_F(ServeE2e, NumClientsSplitTheLoadAndTheirRecordsMerge) {
  // The null model at 100 tokens/s: each request of 4 tokens takes about 40 ms.
  const uint16_t port = start_server({"--model", "null", "--token-rate", "100"});
  ASSERT_NE(port, 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  const fs::path closed = root_ / "closed";
  ASSERT_EQ(run({"run",
                 "--backend",
                 "openai",
                 "--base-url",
                 url,
                 "--model",
                 "null",
                 "--num-clients",
                 "3",
                 "--max-concurrency",
                 "7",
                 "--num-prompts",
                 "30",
                 "--input-len",
                 "8",
                 "--output-len",
                 "4",
                 "--runs",
                 "2",
                 "--result-dir",
                 closed.string()}),
            0)
      << err();
  const json result = json::parse(text_of(closed / "result.json"));
  EXPECT_EQ(result["completed"], 30);
  EXPECT_EQ(result["total_output_tokens"], 120);
  EXPECT_EQ(result["runs"].size(), 2u);
  EXPECT_EQ(result["max_concurrency"], 7);
  EXPECT_EQ(result["config"]["num_clients"], 3);
  ASSERT_EQ(result["engine"]["clients"].size(), 3u);
  // Each client ran its share (7 = 3 + 2 + 2 in flight; 10 prompts each) and measured itself.
  int concurrency = 0;
  for (int i = 0; i < 3; ++i) {
    const fs::path dir = closed / "clients" / ("client-" + std::to_string(i));
    const json c = json::parse(text_of(dir / "result.json"));
    EXPECT_EQ(c["num_prompts"], 10) << i;
    EXPECT_EQ(c["completed"], 10) << i;
    concurrency += c["max_concurrency"].get<int>();
    EXPECT_TRUE(result["engine"]["clients"][i]["client"].contains("event_loop_lag_ms")) << i;
  }
  EXPECT_EQ(concurrency, 7);
  // The merge holds every client's records, not their averages: 2 runs x 30 requests, each
  // prompt of the workload once per run, ids unique, on one clock.
  const std::vector<json> lines = measured_lines(closed);
  ASSERT_EQ(lines.size(), 60u);
  std::set<uint64_t> ids;
  std::map<int, std::set<uint64_t>> prompts;
  for (const json& j : lines) {
    ids.insert(j["id"].get<uint64_t>());
    prompts[j["run"].get<int>()].insert(j["prompt_index"].get<uint64_t>());
    EXPECT_GE(j["t_send_ns"].get<int64_t>(), 0);
  }
  EXPECT_EQ(ids.size(), 60u);
  for (int run = 0; run < 2; ++run) {
    EXPECT_EQ(prompts[run].size(), 30u);
    EXPECT_EQ(*prompts[run].rbegin(), 29u);
  }
  // The totals are what was asked: never more than 7 in flight across the three processes.
  std::vector<json> run0;
  for (const json& j : lines) {
    if (j["run"] == 0) run0.push_back(j);
  }
  EXPECT_LE(peak_in_flight(run0), 7);
  EXPECT_GE(peak_in_flight(run0), 5);

  // Open loop: 40 req/s over 2 clients is 20 req/s each, and 40 arrivals span about a second.
  const fs::path open = root_ / "open";
  ASSERT_EQ(run({"run",        "--backend",     "openai", "--base-url",     url,  "--model",
                 "null",       "--num-clients", "2",      "--request-rate", "40", "--num-prompts",
                 "40",         "--input-len",   "8",      "--output-len",   "2",  "--runs",
                 "1",          "--num-warmups", "0",      "--seed",         "3",  "--result-dir",
                 open.string()}),
            0)
      << err();
  for (int i = 0; i < 2; ++i) {
    const json c =
        json::parse(text_of(open / "clients" / ("client-" + std::to_string(i)) / "result.json"));
    EXPECT_DOUBLE_EQ(c["request_rate"].get<double>(), 20.0) << i;
  }
  const std::vector<json> arrivals = measured_lines(open);
  ASSERT_EQ(arrivals.size(), 40u);
  int64_t first = INT64_MAX, last = 0;
  for (const json& j : arrivals) {
    first = std::min(first, j["t_sched_ns"].get<int64_t>());
    last = std::max(last, j["t_sched_ns"].get<int64_t>());
  }
  const double span_s = static_cast<double>(last - first) / 1e9;
  EXPECT_GT(span_s, 0.5);  // 39 gaps at 40 req/s: 0.975 s on average
  EXPECT_LT(span_s, 1.6);

  // Bad input names the fix, before anything runs.
  EXPECT_EQ(
      run({"run", "--backend", "openai", "--base-url", url, "--model", "null", "--num-clients", "3",
           "--num-prompts", "30", "--result-dir", (root_ / "static").string()}),
      2);
  EXPECT_NE(err().find("--max-concurrency"), std::string::npos) << err();
  EXPECT_EQ(run({"run", "--num-clients", "2", "--max-concurrency", "4", "--result-dir",
                 (root_ / "native").string()}),
            2);
  EXPECT_NE(err().find("--backend openai"), std::string::npos) << err();
}

TEST_F(ServeE2e, MetricsCarryDeviceEnergyWhereNvmlHasIt) {
  ::setenv("INFERBENCH_NVML_LIBRARY", IB_FAKE_NVML_PATH, 1);  // two GPUs, +1 J per reading each
  const uint16_t port = start_server({"--model", "null"});
  ::unsetenv("INFERBENCH_NVML_LIBRARY");
  ASSERT_NE(port, 0);
  const std::string series = "inferbench_energy_joules_total{model_name=\"null\"}";
  const double first = prometheus_value(http_call(port, "GET", "/metrics").body, series);
  const double second = prometheus_value(http_call(port, "GET", "/metrics").body, series);
  EXPECT_GE(first, 0);
  EXPECT_EQ(second - first, 2.0);  // one more reading of each GPU's counter
  ::kill(server_, SIGTERM);
  EXPECT_EQ(wait_exit(server_), 0);
  // Without NVML there is no energy series at all (not a zero).
  const uint16_t plain = start_server({"--model", "null"});
  EXPECT_EQ(http_call(plain, "GET", "/metrics").body.find("inferbench_energy_joules_total"),
            std::string::npos);
}

TEST_F(ServeE2e, PrometheusScrapesOurSeries) {
  if (::system("command -v prometheus >/dev/null 2>&1") != 0) {
    if (std::getenv("CI") != nullptr)
      FAIL() << "prometheus is not installed (scripts/install-deps)";
    GTEST_SKIP() << "prometheus is not installed; scripts/install-deps installs it";
  }
  const uint16_t port = start_server({"--model", "null"});
  ASSERT_NE(port, 0);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(
        http_call(port, "POST", "/v1/completions", R"({"prompt": "abcd", "max_tokens": 5})").status,
        200);
  }
  const auto [prom, prom_port] = start_prometheus(port, "e2e");
  double decode_tokens = -1;
  json answer;
  for (int i = 0; i < 300 && decode_tokens < 0; ++i) {  // up to 30 s
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    HttpReply r;
    try {
      r = http_call(prom_port, "GET",
                    "/api/v1/query?query=inferbench_tokens_total%7Bjob%3D%22e2e%22%2C"
                    "phase%3D%22decode%22%7D");
    } catch (const std::exception&) {
      continue;  // not listening yet
    }
    if (r.status != 200) continue;
    answer = json::parse(r.body, nullptr, false);
    if (!answer.is_object() || answer["data"]["result"].empty()) continue;
    decode_tokens = std::stod(answer["data"]["result"][0]["value"][1].get<std::string>());
  }
  ::kill(prom, SIGTERM);
  wait_exit(prom);
  ASSERT_EQ(decode_tokens, 15) << answer.dump() << text_of(root_ / "prom.err");
  EXPECT_EQ(answer["data"]["result"][0]["metric"]["job"], "e2e");
  EXPECT_EQ(answer["data"]["result"][0]["metric"]["model_name"], "null");
}

std::string url_encode(const std::string& text) {
  std::string out;
  for (const unsigned char c : text) {
    if (std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

// dashboards/inferbench.json: every panel's every query, with the dashboard's variables as an
// import with all models selected sets them, returns data from a real Prometheus (Debian's) that
// scrapes a real `inferbench serve` (tiny-15m on the CPU, device energy from the fake NVML) under
// load.
TEST_F(ServeE2e, DashboardPanelsAllReturnDataFromPrometheus) {
  if (::system("command -v prometheus >/dev/null 2>&1") != 0) {
    if (std::getenv("CI") != nullptr)
      FAIL() << "prometheus is not installed (scripts/install-deps)";
    GTEST_SKIP() << "prometheus is not installed; scripts/install-deps installs it";
  }
  const char* src = std::getenv("INFERBENCH_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  const json dashboard =
      json::parse(read_file(fs::path(src) / "dashboards" / "inferbench.json").value());
  std::vector<std::pair<std::string, std::string>> queries;  // (panel title, expr)
  for (const auto& panel : dashboard["panels"]) {
    for (const auto& target : panel["targets"]) {
      std::string expr = target["expr"].get<std::string>();
      for (const auto& [var, value] : {std::pair<std::string, std::string>{"$model_name", ".*"},
                                       {"$__rate_interval", "30s"}}) {
        for (size_t at = expr.find(var); at != std::string::npos; at = expr.find(var, at)) {
          expr.replace(at, var.size(), value);
        }
      }
      queries.emplace_back(panel["title"].get<std::string>(), expr);
    }
  }
  ASSERT_GE(queries.size(), 15u);

  ::setenv("INFERBENCH_NVML_LIBRARY", IB_FAKE_NVML_PATH, 1);
  const uint16_t port = start_server({"--model", "tiny-15m", "--kv-cache-memory", "64MiB",
                                      "--num-threads", "1", "--metrics-names", "vllm"});
  ::unsetenv("INFERBENCH_NVML_LIBRARY");
  ASSERT_NE(port, 0);
  std::atomic<bool> stop{false};
  std::thread load([&] {
    while (!stop.load()) {
      http_call(port, "POST", "/v1/completions", R"({"prompt": "abcdefgh", "max_tokens": 8})");
    }
  });
  const auto [prom, prom_port] = start_prometheus(port, "dashboard");
  // Each query until it returns a series (rates need two scrapes with traffic between them).
  std::vector<std::string> empty;
  for (const auto& [title, expr] : queries) {
    json answer;
    bool data = false;
    for (int i = 0; i < 400 && !data; ++i) {  // up to 40 s for the first, far less for the rest
      HttpReply r;
      try {
        r = http_call(prom_port, "GET", "/api/v1/query?query=" + url_encode(expr));
      } catch (const std::exception&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;  // not listening yet
      }
      answer = json::parse(r.body, nullptr, false);
      data = r.status == 200 && answer.is_object() && answer["status"] == "success" &&
             !answer["data"]["result"].empty() && answer["data"]["result"][0]["value"][1] != "NaN";
      if (!data) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!data) empty.push_back(title + ": " + expr + " -> " + answer.dump());
  }
  stop = true;
  load.join();
  ::kill(prom, SIGTERM);
  wait_exit(prom);
  EXPECT_TRUE(empty.empty()) << "queries without data:\n"
                             <<
      [&] {
        std::string all;
        for (const auto& e : empty) all += e + "\n";
        return all;
      }() << text_of(root_ / "prom.err");
  // vLLM's names are there too (--metrics-names vllm), for dashboards built for vLLM.
  EXPECT_GE(prometheus_value(http_call(port, "GET", "/metrics").body,
                             "vllm:generation_tokens_total{model_name=\"tiny-15m\"}"),
            1);
}

}  // namespace
}  // namespace ib::testing
