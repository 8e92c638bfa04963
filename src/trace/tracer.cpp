// The tracer (trace.h): ids, tail sampling, the bounded span queue and its exporter thread,
// which POSTs OTLP protobuf batches to the collector over HTTP (Boost.Beast, one connection per
// batch, every step under the export timeout).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "core/clock.h"
#include "trace/trace.h"

namespace ib {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

constexpr size_t kBatchSpans = 512;
constexpr auto kBatchWait = std::chrono::milliseconds(100);  // gathers spans into fewer POSTs

struct Endpoint {
  std::string host;
  std::string port = "80";
  std::string path = "/v1/traces";
};

Result<Endpoint> parse_endpoint(const std::string& url) {
  const std::string fix =
      "give http://HOST:PORT of an OTLP/HTTP collector, e.g. "
      "http://127.0.0.1:4318 (an OpenTelemetry Collector's default)";
  if (url.rfind("https://", 0) == 0) {
    return user_error(fmt::format(
        "--otlp-endpoint {}: https is not supported; {} (a local collector can forward over TLS)",
        url, fix));
  }
  if (url.rfind("http://", 0) != 0) {
    return user_error(fmt::format("--otlp-endpoint {}: not an http:// URL; {}", url, fix));
  }
  Endpoint e;
  const std::string rest = url.substr(7);
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos && rest.size() > slash + 1) e.path = rest.substr(slash);
  const size_t colon = authority.rfind(':');
  if (colon != std::string::npos && authority.find(']', colon) == std::string::npos) {
    e.port = authority.substr(colon + 1);
    authority.resize(colon);
    if (e.port.empty() || e.port.size() > 5 ||
        e.port.find_first_not_of("0123456789") != std::string::npos || std::stoi(e.port) > 65535) {
      return user_error(fmt::format("--otlp-endpoint {}: bad port; {}", url, fix));
    }
  }
  if (authority.size() > 2 && authority.front() == '[' && authority.back() == ']') {
    authority = authority.substr(1, authority.size() - 2);
  }
  if (authority.empty())
    return user_error(fmt::format("--otlp-endpoint {}: no host; {}", url, fix));
  e.host = authority;
  return e;
}

// One POST of an encoded batch; an error names what failed (connect, write, read, status).
Status post_batch(const Endpoint& e, const std::string& body, double timeout_s) {
  net::io_context io;
  net::ip::tcp::resolver resolver(io);
  beast::tcp_stream stream(io);
  const auto timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(timeout_s));
  http::request<http::string_body> request{http::verb::post, e.path, 11};
  request.set(http::field::host, e.host + ":" + e.port);
  request.set(http::field::user_agent, "inferbench");
  request.set(http::field::content_type, "application/x-protobuf");
  request.body() = body;
  request.prepare_payload();
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  beast::error_code failure;
  std::string step = "resolve";

  resolver.async_resolve(e.host, e.port, [&](beast::error_code ec, auto results) {
    if (ec) return void(failure = ec);
    step = "connect";
    stream.expires_after(timeout);
    stream.async_connect(results, [&](beast::error_code ec2, const auto&) {
      if (ec2) return void(failure = ec2);
      step = "send";
      http::async_write(stream, request, [&](beast::error_code ec3, size_t) {
        if (ec3) return void(failure = ec3);
        step = "read the answer";
        http::async_read(stream, buffer, response, [&](beast::error_code ec4, size_t) {
          if (ec4) failure = ec4;
          beast::error_code ignored;
          stream.socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
        });
      });
    });
  });
  // The resolver has no timeout of its own: bound the whole exchange here too.
  io.run_for(timeout + std::chrono::milliseconds(100));
  if (!io.stopped()) {
    return runtime_error(fmt::format("{}:{}: timed out ({})", e.host, e.port, step));
  }
  if (failure) {
    return runtime_error(
        fmt::format("{}:{}: {} failed: {}", e.host, e.port, step, failure.message()));
  }
  const unsigned status = response.result_int();
  if (status < 200 || status >= 300) {
    return runtime_error(fmt::format("{}:{}{}: HTTP {}: {}", e.host, e.port, e.path, status,
                                     response.body().substr(0, 200)));
  }
  return Ok{};
}

class TracerImpl final : public Tracer {
 public:
  TracerImpl(TraceOptions options, Endpoint endpoint)
      : options_(std::move(options)),
        endpoint_(std::move(endpoint)),
        rng_(std::random_device{}()),
        unix_offset_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count() -
                        now_ns()) {
    thread_ = std::thread([this] { export_loop(); });
  }
  ~TracerImpl() override { shutdown(); }

  TraceContext new_trace() override {
    TraceContext c;
    std::lock_guard lock(rng_mu_);
    do {
      fill(c.trace_id);
    } while (c.trace_id == TraceId{});
    do {
      fill(c.span_id);
    } while (c.span_id == SpanId{});
    return c;
  }

  SpanId new_span_id() override {
    SpanId id{};
    std::lock_guard lock(rng_mu_);
    do {
      fill(id);
    } while (id == SpanId{});
    return id;
  }

  int64_t unix_ns(int64_t monotonic_ns) const override { return monotonic_ns + unix_offset_ns_; }

  bool keep(const TraceId& trace_id, bool failed, int64_t duration_ns) const override {
    if (failed) return true;
    if (options_.slow_ms >= 0 && static_cast<double>(duration_ns) >= options_.slow_ms * 1e6) {
      return true;
    }
    if (options_.sample_ratio >= 1) return true;
    if (options_.sample_ratio <= 0) return false;
    // As OpenTelemetry's TraceIdRatioBased: the trace id's low 8 bytes against ratio x 2^64, so
    // every process with the same ratio keeps the same traces (client and server agree).
    uint64_t low = 0;
    for (size_t i = 8; i < 16; ++i) low = (low << 8) | trace_id[i];
    return static_cast<double>(low) < options_.sample_ratio * 18446744073709551616.0;
  }

  void finish_request(std::vector<Span> spans, bool failed, int64_t duration_ns) override {
    if (spans.empty()) return;
    const bool kept = keep(spans.front().trace_id, failed, duration_ns);
    {
      std::lock_guard lock(mu_);
      if (!kept) {
        ++stats_.requests_sampled_out;
        return;
      }
      ++stats_.requests_kept;
      if (stopping_ || queue_.size() + spans.size() > options_.max_queue_spans) {
        stats_.spans_dropped_queue_full += spans.size();
        return;
      }
      for (Span& s : spans) queue_.push_back(std::move(s));
    }
    wake_.notify_one();
  }

  TraceStats stats() const override {
    std::lock_guard lock(mu_);
    return stats_;
  }

  void flush() override {
    std::unique_lock lock(mu_);
    flushing_ = true;
    wake_.notify_one();
    const auto limit = std::chrono::duration<double>(2 * options_.export_timeout_s + 0.5);
    exported_.wait_for(lock, limit, [&] { return queue_.empty() && !exporting_; });
    flushing_ = false;
  }

  void shutdown() override {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      flush_deadline_ns_ =
          now_ns() + static_cast<int64_t>(options_.export_timeout_s * 1e9);  // then drop
    }
    wake_.notify_one();
    thread_.join();
  }

 private:
  template <size_t N>
  void fill(std::array<uint8_t, N>& id) {
    for (size_t i = 0; i < N; i += 8) {
      const uint64_t r = rng_();
      for (size_t j = 0; j < 8 && i + j < N; ++j) id[i + j] = static_cast<uint8_t>(r >> (8 * j));
    }
  }

  void export_loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || flushing_ || !queue_.empty(); });
      if (!stopping_ && !flushing_) {
        wake_.wait_for(lock, kBatchWait,
                       [&] { return stopping_ || flushing_ || queue_.size() >= kBatchSpans; });
      }
      if (queue_.empty()) {
        exported_.notify_all();
        if (stopping_) return;  // everything went out
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        continue;
      }
      if (stopping_ && now_ns() > flush_deadline_ns_) {
        stats_.spans_dropped_export_failed += queue_.size();
        stats_.last_error = "the final flush ran out of time";
        queue_.clear();
        exported_.notify_all();
        return;
      }
      const size_t n = std::min(queue_.size(), kBatchSpans);
      std::vector<Span> batch(std::make_move_iterator(queue_.begin()),
                              std::make_move_iterator(queue_.begin() + static_cast<long>(n)));
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<long>(n));
      exporting_ = true;
      lock.unlock();
      const Status sent = post_batch(endpoint_, encode_otlp_traces(batch, options_.service_name),
                                     options_.export_timeout_s);
      lock.lock();
      exporting_ = false;
      if (sent.ok()) {
        stats_.spans_exported += n;
      } else {
        stats_.spans_dropped_export_failed += n;
        stats_.last_error = sent.error().message;
      }
      exported_.notify_all();
    }
  }

  const TraceOptions options_;
  const Endpoint endpoint_;
  std::mutex rng_mu_;
  std::mt19937_64 rng_;  // guarded by rng_mu_
  const int64_t unix_offset_ns_;

  mutable std::mutex mu_;
  std::condition_variable wake_;      // the exporter waits on it
  std::condition_variable exported_;  // flush() waits on it
  std::deque<Span> queue_;            // guarded by mu_
  bool exporting_ = false;            // a batch is being sent; guarded by mu_
  bool flushing_ = false;             // guarded by mu_
  TraceStats stats_;                  // guarded by mu_
  bool stopping_ = false;             // guarded by mu_
  int64_t flush_deadline_ns_ = 0;     // guarded by mu_
  std::thread thread_;                // last: its loop uses the members above
};

}  // namespace

Status validate_trace_options(const TraceOptions& o) {
  if (!o.endpoint.empty()) IB_TRY(parse_endpoint(o.endpoint));
  if (!(o.sample_ratio >= 0 && o.sample_ratio <= 1)) {
    return user_error(fmt::format(
        "--trace-sample-ratio {}: must be in [0, 1] (the share of requests traced; failed and "
        "slow requests are always traced)",
        o.sample_ratio));
  }
  if (std::isnan(o.slow_ms)) return user_error("--trace-slow-ms: must be a number of ms >= 0");
  if (o.max_queue_spans == 0) return user_error("the trace queue needs room for a span");
  if (!(o.export_timeout_s > 0)) return user_error("the trace export timeout must be positive");
  return Ok{};
}

Result<std::unique_ptr<Tracer>> make_tracer(TraceOptions options) {
  IB_TRY(validate_trace_options(options));
  if (options.endpoint.empty()) return user_error("tracing needs --otlp-endpoint URL");
  IB_ASSIGN_OR_RETURN(Endpoint endpoint, parse_endpoint(options.endpoint));
  return std::unique_ptr<Tracer>(std::make_unique<TracerImpl>(std::move(options), endpoint));
}

}  // namespace ib
