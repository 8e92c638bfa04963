// The openai target (openai_target.h): its event-loop thread, hand-off of requests, completion
// callbacks, and the client's own measurements.
#include "targets/openai_target.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/stats.h"
#include "targets/chat_images.h"
#include "targets/detail/openai_client.h"
#include "targets/detail/trace_json.h"

namespace ib {
namespace {

namespace net = boost::asio;
using nlohmann::json;

constexpr auto kTick = std::chrono::milliseconds(10);
// The loop thread on CPU for more than this share of the active time: the client was the
// bottleneck (its own CPU time, kernel time for the sockets included).
constexpr double kBoundCpuShare = 0.9;
// Event-loop lag p99 above this: per-token timestamps may be late by that much (a warning).
constexpr double kLagWarningMs = 5.0;

int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

double ms_percentile(std::vector<int64_t> ns, double p) {
  if (ns.empty()) return 0;
  std::vector<double> ms(ns.size());
  std::transform(ns.begin(), ns.end(), ms.begin(), [](int64_t v) { return ns_to_ms(v); });
  return percentile(ms, p);
}

class OpenAITarget final : public Target {
 public:
  OpenAITarget(OpenAITargetOptions options, BaseUrl url, Dialect dialect)
      : options_(std::move(options)), url_(std::move(url)), dialect_(dialect) {
    if (options_.endpoint.empty()) {
      options_.endpoint = options_.chat ? "/v1/chat/completions" : "/v1/completions";
    }
    const bool default_port = url_.port == (url_.tls ? "443" : "80");
    host_header_ = default_port ? url_.host : url_.host + ":" + url_.port;
  }
  ~OpenAITarget() override { teardown(); }

  std::string name() const override { return options_.chat ? "openai-chat" : "openai"; }

  Status setup(TargetCallbacks callbacks) override {
    cb_ = std::move(callbacks);
    if (!options_.trace.endpoint.empty()) {
      IB_ASSIGN_OR_RETURN(tracer_, make_tracer(options_.trace));
    }
    boost::system::error_code ec;
    net::ip::tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(url_.host, url_.port, ec);
    if (ec) {
      return user_error(
          fmt::format("--base-url: cannot resolve {}:{} ({})", url_.host, url_.port, ec.message()));
    }
    if (url_.tls) {
      ssl_.emplace(net::ssl::context::tls_client);
      ssl_->set_default_verify_paths(ec);
      ssl_->set_verify_mode(options_.verify_tls ? net::ssl::verify_peer : net::ssl::verify_none);
    }
    detail::ClientConfig config{url_, options_.request_timeout_s,
                                static_cast<bool>(options_.on_text), options_.verify_tls};
    client_ = detail::make_client(io_, ssl_ ? &*ssl_ : nullptr, std::move(endpoints), config,
                                  stats_, [this](detail::ClientCompletion&& c) { on_done(c); });
    tick_expected_ns_ = now_ns() + std::chrono::nanoseconds(kTick).count();
    tick();
    thread_ = std::thread([this] { io_.run(); });
    return Ok{};
  }

  Status submit(const RequestSpec& r) override {
    IB_ASSIGN_OR_RETURN(const std::string body, openai_request_body(options_, dialect_, r));
    detail::ClientJob job;
    job.id = r.id;
    job.input_len = r.images.empty() ? r.input_len : 0;  // usage adds the server's visual tokens
    job.output_len = r.output_len;
    std::optional<Traced> traced;
    if (tracer_) {
      traced = Traced{tracer_->new_trace(), 0, r.output_len,
                      r.lora_name.empty() ? options_.model : r.lora_name};
    }
    job.request = fmt::format(
        "POST {}{} HTTP/1.1\r\nHost: {}\r\nUser-Agent: inferbench\r\nContent-Type: "
        "application/json\r\nAccept: text/event-stream\r\n{}{}Content-Length: {}\r\n"
        "Connection: keep-alive\r\n\r\n{}",
        url_.path_prefix, options_.endpoint, host_header_,
        options_.api_key.empty() ? "" : "Authorization: Bearer " + options_.api_key + "\r\n",
        traced ? "traceparent: " + format_traceparent(traced->context) + "\r\n" : "", body.size(),
        body);
    {
      std::lock_guard lock(mu_);
      if (!thread_.joinable()) return runtime_error("the openai target is not set up");
      ++live_;
    }
    if (!r.images.empty()) {
      ++requests_with_images_;
      image_parts_sent_ += static_cast<int64_t>(r.images.size());
    }
    job.submit_ns = now_ns();
    if (traced) traced->submit_ns = job.submit_ns;
    net::post(io_, [this, j = std::move(job), t = std::move(traced)]() mutable {
      if (active_since_ns_ == 0) active_since_ns_ = now_ns();
      if (t) traced_.emplace(j.id, std::move(*t));
      ++in_loop_;
      client_->start(std::move(j));
    });
    return Ok{};
  }

  void drain() override {
    std::unique_lock lock(mu_);
    idle_.wait(lock, [&] { return live_ == 0; });
  }

  void cancel_all() override {
    net::post(io_, [this] { client_->cancel_all(); });
  }

  void teardown() override {
    if (!thread_.joinable()) return;
    cancel_all();
    drain();
    if (tracer_) tracer_->shutdown();  // the last spans, within the export timeout
    final_description_ = describe();
    // A tick that already fired is queued and not cancellable: the flag stops it re-arming, or
    // the loop would never run out of work and the join below would wait forever.
    net::post(io_, [this] {
      stopping_ = true;
      tick_timer_.cancel();
    });
    work_.reset();
    thread_.join();
    client_.reset();
  }

  std::string describe_json() const override { return describe().dump(); }

 private:
  // A request's context, kept on the loop thread until its span is made.
  struct Traced {
    TraceContext context;
    int64_t submit_ns = 0;
    int max_tokens = 0;
    std::string model;  // "model" as sent (a LoRA adapter's name)
  };

  // The request's CLIENT span: submit() to its end, the root of the trace the server continues.
  void trace_done(const detail::ClientCompletion& c) {
    auto it = traced_.find(c.id);
    if (it == traced_.end()) return;
    const Traced t = std::move(it->second);
    traced_.erase(it);
    const RequestOutcome& o = c.outcome;
    const int64_t end_ns = o.time_ns > 0 ? o.time_ns : now_ns();
    const std::string operation = options_.chat ? "chat" : "text_completion";
    Span s;
    s.trace_id = t.context.trace_id;
    s.span_id = t.context.span_id;
    s.name = operation + " " + t.model;
    s.kind = SpanKind::kClient;
    s.start_unix_ns = tracer_->unix_ns(t.submit_ns);
    s.end_unix_ns = tracer_->unix_ns(end_ns);
    s.error = !o.ok;
    s.status_message = o.error.substr(0, 512);
    auto& a = s.attributes;
    a.push_back({"gen_ai.operation.name", operation});
    a.push_back({"gen_ai.request.model", t.model});
    a.push_back({"gen_ai.request.max_tokens", int64_t{t.max_tokens}});
    a.push_back({"gen_ai.usage.input_tokens", int64_t{o.prompt_tokens}});
    a.push_back({"gen_ai.usage.output_tokens", int64_t{o.output_tokens}});
    a.push_back({"gen_ai.response.finish_reasons", std::vector<std::string>{o.finish_reason}});
    if (!c.chunks.empty()) {
      a.push_back(
          {"gen_ai.latency.time_to_first_token", ns_to_s(c.chunks.front().first - t.submit_ns)});
    }
    a.push_back({"gen_ai.latency.e2e", ns_to_s(end_ns - t.submit_ns)});
    a.push_back({"server.address", url_.host});
    a.push_back({"server.port", int64_t{std::stoi(url_.port)}});
    if (!o.ok) a.push_back({"error.type", o.finish_reason});
    tracer_->finish_request({std::move(s)}, !o.ok, end_ns - t.submit_ns);
  }

  void on_done(detail::ClientCompletion& c) {
    if (tracer_) trace_done(c);
    for (const auto& [t, n] : c.chunks) cb_.on_tokens(c.id, n, t);
    if (options_.on_text) options_.on_text(c.id, c.text);
    cb_.on_done(c.id, c.outcome);
    if (--in_loop_ == 0) {
      active_ns_ += now_ns() - active_since_ns_;
      active_since_ns_ = 0;
    }
    {
      std::lock_guard lock(mu_);
      --live_;
    }
    idle_.notify_all();
  }

  // Event-loop lag: how late a 10 ms ticker fires, sampled while requests are in flight.
  void tick() {
    tick_timer_.expires_at(
        std::chrono::steady_clock::time_point(std::chrono::nanoseconds(tick_expected_ns_)));
    tick_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || stopping_) return;
      const int64_t now = now_ns();
      const int64_t cpu = thread_cpu_ns();
      if (in_loop_ > 0) {
        lag_ns_.push_back(now - tick_expected_ns_);
        if (last_tick_ns_ > 0) {
          loop_wall_ns_ += now - last_tick_ns_;
          loop_cpu_ns_ += cpu - last_tick_cpu_ns_;
        }
      }
      last_tick_ns_ = now;
      last_tick_cpu_ns_ = cpu;
      tick_expected_ns_ = now + std::chrono::nanoseconds(kTick).count();
      tick();
    });
  }

  json client_report() const {
    const int64_t active = active_ns_ + (active_since_ns_ > 0 ? now_ns() - active_since_ns_ : 0);
    auto share = [](int64_t part, int64_t whole) {
      return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
    };
    auto per_event_us = [&](int64_t ns) {
      return stats_.events > 0 ? static_cast<double>(ns) / 1e3 / static_cast<double>(stats_.events)
                               : 0.0;
    };
    const double cpu_share = share(loop_cpu_ns_, loop_wall_ns_);
    const double lag_p99 = ms_percentile(lag_ns_, 99);
    json report = {
        {"sse_events", stats_.events},
        {"bytes_received", stats_.bytes},
        {"handler_us_per_event", per_event_us(stats_.busy_ns)},
        {"loop_cpu_us_per_event",
         per_event_us(static_cast<int64_t>(cpu_share * static_cast<double>(active)))},
        {"handler_busy_fraction", share(stats_.busy_ns, active)},
        {"loop_cpu_fraction", cpu_share},
        {"event_loop_lag_ms",
         {{"p50", ms_percentile(lag_ns_, 50)},
          {"p99", lag_p99},
          {"max",
           lag_ns_.empty() ? 0.0 : ns_to_ms(*std::max_element(lag_ns_.begin(), lag_ns_.end()))},
          {"samples", lag_ns_.size()}}},
        {"dispatch_delay_ms",
         {{"p50", ms_percentile(stats_.dispatch_delay_ns, 50)},
          {"p99", ms_percentile(stats_.dispatch_delay_ns, 99)}}},
        {"connections_opened", stats_.connections_opened},
        {"stale_reconnects", stats_.stale_reconnects},
        {"client_bound", cpu_share > kBoundCpuShare},
        {"client_bound_rule",
         fmt::format("the event-loop thread was on CPU more than {:.0f}% of the time requests "
                     "were in flight",
                     kBoundCpuShare * 100)},
    };
    if (lag_p99 > kLagWarningMs) {
      report["timing_warning"] = fmt::format(
          "the event loop ran {:.1f} ms late at p99: token timestamps may be late by as much "
          "(server bursts or a busy client CPU)",
          lag_p99);
    }
    return report;
  }

  json describe() const {
    if (!thread_.joinable() && !final_description_.is_null()) return final_description_;
    json client = json::object();
    json tokens = json::object();
    if (thread_.joinable()) {
      std::promise<std::pair<json, json>> p;
      auto f = p.get_future();
      net::post(const_cast<net::io_context&>(io_), [&] {
        p.set_value({client_report(), json{{"requests_with_usage", stats_.with_usage},
                                           {"requests_without_usage", stats_.without_usage},
                                           {"output_len_mismatch", stats_.output_mismatch},
                                           {"input_len_mismatch", stats_.input_mismatch}}});
      });
      std::tie(client, tokens) = f.get();
    }
    const json traces = tracer_ ? traces_json(options_.trace, *tracer_) : json();
    json d{
        {"target", name()},
        {"base_url", fmt::format("{}://{}:{}{}", url_.tls ? "https" : "http", url_.host, url_.port,
                                 url_.path_prefix)},
        {"endpoint", options_.endpoint},
        {"dialect", dialect_name(dialect_)},
        {"model", {{"name", options_.model}}},
        {"request_timeout_s", options_.request_timeout_s},
        {"extra_body", options_.extra_body},
        {"client", client},
        {"token_counts", tokens},
        {"traces", traces},
    };
    // Chat with images: what was sent, warm-ups included (the server's visual tokens are in its
    // usage only).
    if (options_.image_urls && requests_with_images_.load() > 0) {
      json& images = d["images"] = options_.image_urls->describe();
      images["requests_with_images"] = requests_with_images_.load();
      images["image_parts_sent"] = image_parts_sent_.load();
    }
    return d;
  }

  OpenAITargetOptions options_;
  BaseUrl url_;
  Dialect dialect_;
  std::string host_header_;
  TargetCallbacks cb_;
  json final_description_;  // taken at teardown, while the loop still runs

  net::io_context io_{1};
  net::executor_work_guard<net::io_context::executor_type> work_ = net::make_work_guard(io_);
  std::optional<net::ssl::context> ssl_;
  std::unique_ptr<detail::Client> client_;
  std::unique_ptr<Tracer> tracer_;  // --otlp-endpoint; thread-safe
  std::thread thread_;
  net::steady_timer tick_timer_{io_};

  std::mutex mu_;
  std::condition_variable idle_;
  int live_ = 0;  // submitted, not done; guarded by mu_
  // Submitted requests with images and their image_url parts (submit()'s thread writes).
  std::atomic<int64_t> requests_with_images_{0};
  std::atomic<int64_t> image_parts_sent_{0};

  // Loop thread only.
  detail::ClientStats stats_;
  int in_loop_ = 0;
  int64_t tick_expected_ns_ = 0;
  bool stopping_ = false;  // event-loop thread only
  int64_t last_tick_ns_ = 0;
  int64_t last_tick_cpu_ns_ = 0;
  int64_t loop_wall_ns_ = 0;  // wall time between ticks while requests were in flight
  int64_t loop_cpu_ns_ = 0;   // the loop thread's CPU time over the same intervals
  int64_t active_since_ns_ = 0;
  int64_t active_ns_ = 0;
  std::vector<int64_t> lag_ns_;
  std::unordered_map<uint64_t, Traced> traced_;  // requests in flight, when tracing
};

}  // namespace

Result<std::unique_ptr<Target>> make_openai_target(OpenAITargetOptions options) {
  IB_ASSIGN_OR_RETURN(BaseUrl url, parse_base_url(options.base_url));
  IB_ASSIGN_OR_RETURN(const Dialect dialect, resolve_dialect(options.dialect, url));
  if (!options.extra_body.empty()) {
    const json extra = json::parse(options.extra_body, nullptr, false);
    if (extra.is_discarded() || !extra.is_object()) {
      return user_error(fmt::format("--extra-body {}: must be a JSON object", options.extra_body));
    }
  }
  if (!(options.request_timeout_s > 0)) {
    return user_error("--request-timeout must be positive seconds");
  }
  return std::unique_ptr<Target>(
      std::make_unique<OpenAITarget>(std::move(options), std::move(url), dialect));
}

}  // namespace ib
