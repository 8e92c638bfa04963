// The tracer without a collector: trace-context headers, the sampling rules, and that spans
// which cannot be exported (unreachable endpoint, full queue) are dropped, counted and never
// block the caller. The exported bytes are checked by an independent decoder in
// otlp_npm_test (src/cli).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include <atomic>

#include "core/clock.h"
#include "trace/trace.h"

namespace ib {
namespace {

// A bound TCP port: listening (connections complete but are never answered) or closed again
// (connections are refused).
class LocalPort {
 public:
  explicit LocalPort(bool listen_on_it) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    if (listen_on_it) {
      EXPECT_EQ(::listen(fd_, 64), 0);
    } else {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~LocalPort() { close(); }
  void close() {
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd() const { return fd_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

std::vector<Span> request_spans(Tracer& tracer, int n) {
  const TraceContext c = tracer.new_trace();
  std::vector<Span> spans;
  for (int i = 0; i < n; ++i) {
    Span s;
    s.trace_id = c.trace_id;
    s.span_id = tracer.new_span_id();
    s.name = i == 0 ? std::string("request") : std::string("child");
    spans.push_back(std::move(s));
  }
  return spans;
}

// A collector of one connection at a time: each request's head and body are kept, and answered
// 200 with an empty body.
class TinyCollector {
 public:
  TinyCollector() : port_(true) {
    thread_ = std::thread([this] { serve(); });
  }
  ~TinyCollector() {
    stop_ = true;
    port_.close();
    thread_.join();
  }
  std::string url() const { return port_.url(); }
  std::vector<std::pair<std::string, std::string>> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  void serve() {
    while (!stop_) {
      const int fd = ::accept(port_.fd(), nullptr, nullptr);
      if (fd < 0) return;
      std::string data;
      char buf[4096];
      size_t head_end = std::string::npos;
      size_t length = 0;
      for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) break;
        data.append(buf, static_cast<size_t>(n));
        if (head_end == std::string::npos &&
            (head_end = data.find("\r\n\r\n")) != std::string::npos) {
          const size_t at = data.find("Content-Length: ");
          length = at < head_end ? std::stoul(data.substr(at + 16)) : 0;
        }
        if (head_end != std::string::npos && data.size() >= head_end + 4 + length) break;
      }
      if (head_end != std::string::npos) {
        std::lock_guard lock(mu_);
        requests_.emplace_back(data.substr(0, head_end), data.substr(head_end + 4));
      }
      const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
      (void)!::write(fd, ok.data(), ok.size());
      ::close(fd);
    }
  }

  LocalPort port_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::pair<std::string, std::string>> requests_;  // (head, body); guarded by mu_
};

TEST(TraceContext, RoundTripsAndRejectsMalformedHeaders) {
  const std::string h = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const auto c = parse_traceparent(h);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(to_hex(c->trace_id.data(), 16), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(to_hex(c->span_id.data(), 8), "00f067aa0ba902b7");
  EXPECT_TRUE(c->sampled);
  EXPECT_EQ(format_traceparent(*c), h);
  EXPECT_FALSE(
      parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")->sampled);
  // A later version may append fields; version 00 may not.
  EXPECT_TRUE(parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz"));
  for (const char* bad :
       {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // 00 with extra
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero span id
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // uppercase
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",     // short trace id
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""}) {
    EXPECT_FALSE(parse_traceparent(bad).has_value()) << bad;
  }
}

TEST(Tracer, OptionsAreValidatedNamingTheFlag) {
  TraceOptions o;
  o.endpoint = "https://collector:4318";
  EXPECT_NE(validate_trace_options(o).error().message.find("--otlp-endpoint"), std::string::npos);
  o.endpoint = "collector:4318";
  EXPECT_FALSE(validate_trace_options(o).ok());
  o.endpoint = "http://127.0.0.1:99999";
  EXPECT_FALSE(validate_trace_options(o).ok());
  o.endpoint = "http://127.0.0.1:4318";
  o.sample_ratio = 1.5;
  EXPECT_NE(validate_trace_options(o).error().message.find("--trace-sample-ratio"),
            std::string::npos);
  o.sample_ratio = 0.25;
  EXPECT_TRUE(validate_trace_options(o).ok());
}

TEST(Tracer, KeepsFailedAndSlowRequestsAndARatioOfTheRestByTraceId) {
  TraceOptions o;
  o.endpoint = LocalPort(false).url();
  o.sample_ratio = 0.25;
  o.slow_ms = 100;
  auto a = make_tracer(o);
  auto b = make_tracer(o);  // another process with the same ratio
  ASSERT_TRUE(a.ok() && b.ok());
  int kept = 0;
  constexpr int kTraces = 20000;
  for (int i = 0; i < kTraces; ++i) {
    const TraceId id = (*a)->new_trace().trace_id;
    const bool k = (*a)->keep(id, false, 99'000'000);
    EXPECT_EQ(k, (*b)->keep(id, false, 5'000'000));   // the same choice for the same trace
    EXPECT_TRUE((*a)->keep(id, true, 0));             // failed
    EXPECT_TRUE((*a)->keep(id, false, 100'000'000));  // slow
    kept += k ? 1 : 0;
  }
  EXPECT_NEAR(static_cast<double>(kept) / kTraces, 0.25, 0.02);

  o.sample_ratio = 0;
  o.slow_ms = -1;
  auto none = make_tracer(o);
  ASSERT_TRUE(none.ok());
  const TraceId id = (*none)->new_trace().trace_id;
  EXPECT_FALSE((*none)->keep(id, false, int64_t{1} << 50));
  EXPECT_TRUE((*none)->keep(id, true, 0));
}

TEST(Tracer, ExportsBatchesAsProtobufPostsAndFlushAccountsForThem) {
  TinyCollector collector;
  TraceOptions o;
  o.endpoint = collector.url();  // no path: OTLP's /v1/traces
  auto tracer = make_tracer(o);
  ASSERT_TRUE(tracer.ok());
  for (int i = 0; i < 3; ++i) (*tracer)->finish_request(request_spans(**tracer, 2), false, 0);
  (*tracer)->flush();
  const TraceStats s = (*tracer)->stats();
  EXPECT_EQ(s.spans_exported, 6u) << s.last_error;
  EXPECT_EQ(s.spans_dropped(), 0u);
  const auto requests = collector.requests();
  ASSERT_FALSE(requests.empty());
  EXPECT_EQ(requests[0].first.rfind("POST /v1/traces HTTP/1.1", 0), 0u) << requests[0].first;
  EXPECT_NE(requests[0].first.find("Content-Type: application/x-protobuf"), std::string::npos);
  EXPECT_EQ(requests[0].second[0], '\x0a');  // ExportTraceServiceRequest.resource_spans (1, LEN)
  // The same bytes as the encoder's (the spans' ids are in them).
  EXPECT_NE(requests[0].second.find("inferbench"), std::string::npos);
}

TEST(Tracer, AnUnreachableEndpointDropsAndCountsTheSpans) {
  TraceOptions o;
  o.endpoint = LocalPort(false).url();  // refused
  auto tracer = make_tracer(o);
  ASSERT_TRUE(tracer.ok());
  for (int i = 0; i < 10; ++i) (*tracer)->finish_request(request_spans(**tracer, 5), false, 0);
  (*tracer)->shutdown();
  const TraceStats s = (*tracer)->stats();
  EXPECT_EQ(s.requests_kept, 10u);
  EXPECT_EQ(s.spans_exported, 0u);
  EXPECT_EQ(s.spans_dropped(), 50u);
  EXPECT_NE(s.last_error.find("connect"), std::string::npos) << s.last_error;
}

TEST(Tracer, AFullQueueDropsWithoutBlockingTheCaller) {
  LocalPort silent(true);  // accepts connections, never answers
  TraceOptions o;
  o.endpoint = silent.url();
  o.max_queue_spans = 8;
  o.export_timeout_s = 0.3;
  auto tracer = make_tracer(o);
  ASSERT_TRUE(tracer.ok());
  const int64_t start = now_ns();
  for (int i = 0; i < 200; ++i) (*tracer)->finish_request(request_spans(**tracer, 4), false, 0);
  EXPECT_LT(ns_to_ms(now_ns() - start), 100.0);  // 200 requests, none waited on the exporter
  (*tracer)->shutdown();
  const TraceStats s = (*tracer)->stats();
  EXPECT_EQ(s.spans_exported, 0u);
  EXPECT_GE(s.spans_dropped_queue_full, 4u * 190);  // at most two requests fit
  EXPECT_EQ(s.spans_dropped(), 800u);               // every span is accounted for
  EXPECT_NE(s.last_error.find("timeout"), std::string::npos) << s.last_error;
}

TEST(Tracer, SampledOutRequestsAreCountedNotQueued) {
  TraceOptions o;
  o.endpoint = LocalPort(false).url();
  o.sample_ratio = 0;
  auto tracer = make_tracer(o);
  ASSERT_TRUE(tracer.ok());
  for (int i = 0; i < 7; ++i) (*tracer)->finish_request(request_spans(**tracer, 3), false, 0);
  (*tracer)->finish_request(request_spans(**tracer, 3), true, 0);
  (*tracer)->shutdown();
  const TraceStats s = (*tracer)->stats();
  EXPECT_EQ(s.requests_sampled_out, 7u);
  EXPECT_EQ(s.requests_kept, 1u);
  EXPECT_EQ(s.spans_dropped(), 3u);
}

}  // namespace
}  // namespace ib
