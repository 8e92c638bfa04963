// Test support: a server running on a loopback port in a background thread, and a small blocking
// HTTP client (Boost.Beast) that talks to it. Tests only.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "model/presets.h"
#include "server/server.h"

namespace ib::testing {

// tiny-15m on the CPU with a small KV pool: fast enough for tests, real engine work.
inline EngineGeneratorOptions tiny_engine(int64_t kv_bytes = 32 << 20) {
  EngineGeneratorOptions o;
  auto model = find_preset("tiny-15m");
  EXPECT_TRUE(model.ok());
  o.model = *model;
  o.engine.cpu_kv_cache_bytes = kv_bytes;
  o.engine.max_num_seqs = 64;
  o.backend.num_threads = 1;
  return o;
}

class RunningServer {
 public:
  RunningServer(std::unique_ptr<Generator> generator, ServerOptions options = {},
                std::unique_ptr<Tokenizer> tokenizer = make_byte_tokenizer()) {
    options.host = "127.0.0.1";
    options.port = 0;
    raise_open_file_limit();
    server_ = make_server(std::move(options), std::move(generator), std::move(tokenizer));
    const Status st = server_->start();
    EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
    port_ = server_->port();
    thread_ = std::thread([this] { server_->run(); });
  }
  ~RunningServer() { stop(); }
  void stop() {
    if (!thread_.joinable()) return;
    server_->request_stop();
    thread_.join();
  }
  // Drains and waits for run() to return.
  void drain_and_join() {
    server_->request_drain();
    thread_.join();
  }
  uint16_t port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  std::unique_ptr<Server> server_;
  std::thread thread_;
  uint16_t port_ = 0;
};

struct HttpReply {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;
};

// One request on a fresh connection; the whole response (chunked bodies decoded).
inline HttpReply http_call(uint16_t port, const std::string& method, const std::string& target,
                           const std::string& body = "",
                           const std::map<std::string, std::string>& headers = {}) {
  namespace net = boost::asio;
  namespace http = boost::beast::http;
  net::io_context io;
  net::ip::tcp::socket socket(io);
  socket.connect({net::ip::make_address("127.0.0.1"), port});
  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.set(http::field::host, "127.0.0.1");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();
  http::write(socket, req);
  boost::beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1u << 30);
  boost::system::error_code ec;
  http::read(socket, buffer, parser, ec);
  HttpReply r;
  if (ec) return r;
  r.status = static_cast<int>(parser.get().result_int());
  r.body = parser.get().body();
  for (const auto& f : parser.get()) {
    r.headers[std::string(f.name_string())] = std::string(f.value());
  }
  return r;
}

// The value of a Prometheus series line "name{labels} value" whose text starts with prefix.
inline double prometheus_value(const std::string& text, const std::string& prefix) {
  size_t pos = 0;
  while ((pos = text.find(prefix, pos)) != std::string::npos) {
    if (pos == 0 || text[pos - 1] == '\n') {
      const size_t end = text.find('\n', pos);
      const std::string line = text.substr(pos, end - pos);
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
    ++pos;
  }
  return -1;
}

// Polls /metrics until the series reaches value (or the timeout passes); returns the last value.
inline double wait_for_metric(uint16_t port, const std::string& prefix, double value,
                              int timeout_ms = 5000) {
  double v = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    v = prometheus_value(http_call(port, "GET", "/metrics").body, prefix);
    if (v == value) return v;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return v;
}

}  // namespace ib::testing
