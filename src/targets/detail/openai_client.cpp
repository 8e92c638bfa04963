// Streamed HTTP(S) exchanges of the openai target (openai_client.h), one template for plain TCP
// and TLS streams.
#include "targets/detail/openai_client.h"

#include <array>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>

#include "core/clock.h"
#include "targets/detail/http_body.h"
#include "targets/detail/openai_sse.h"

namespace ib::detail {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

constexpr size_t kErrorExcerptBytes = 300;

bool is_stale(const beast::error_code& ec) {
  return ec == net::error::eof || ec == net::error::connection_reset ||
         ec == net::error::broken_pipe || ec == http::error::end_of_stream ||
         ec == ssl::error::stream_truncated;
}

template <class Stream>
class ClientImpl final : public Client {
  static constexpr bool kTls = !std::is_same_v<Stream, tcp::socket>;

 public:
  ClientImpl(net::io_context& io, ssl::context* ssl_ctx, tcp::resolver::results_type endpoints,
             ClientConfig config, ClientStats& stats, DoneFn done)
      : io_(io),
        ssl_(ssl_ctx),
        endpoints_(std::move(endpoints)),
        config_(std::move(config)),
        stats_(stats),
        done_(std::move(done)) {}

  void start(ClientJob job) override {
    auto ex = std::make_shared<Exchange>(*this, std::move(job));
    live_[ex->job.id] = ex;
    if (!idle_.empty()) {
      ex->conn = std::move(idle_.back());
      idle_.pop_back();
      ex->reused = true;
    }
    ex->run();
  }

  void cancel_all() override {
    std::vector<std::shared_ptr<Exchange>> all;
    for (auto& [id, ex] : live_) all.push_back(ex);
    for (auto& ex : all) ex->end("aborted", "cancelled");
  }

 private:
  struct Conn {
    explicit Conn(net::io_context& io, ssl::context* ctx) : stream(make(io, ctx)) {}
    static Stream make(net::io_context& io, ssl::context* ctx) {
      if constexpr (kTls) {
        return Stream(io, *ctx);
      } else {
        (void)ctx;
        return Stream(io);
      }
    }
    Stream stream;
    beast::flat_buffer buffer;
  };

  struct Exchange : std::enable_shared_from_this<Exchange> {
    Exchange(ClientImpl& client, ClientJob j) : c(client), job(std::move(j)), deadline(c.io_) {}

    void run() {
      deadline.expires_after(
          std::chrono::nanoseconds(static_cast<int64_t>(c.config_.timeout_s * 1e9)));
      deadline.async_wait([self = this->shared_from_this()](beast::error_code ec) {
        if (!ec) self->end("error", fmt::format("timeout after {} s", self->c.config_.timeout_s));
      });
      if (conn) return write();
      connect();
    }

    void connect() {
      conn = std::make_unique<Conn>(c.io_, c.ssl_);
      ++c.stats_.connections_opened;
      net::async_connect(
          beast::get_lowest_layer(conn->stream), c.endpoints_,
          [self = this->shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
            if (ec) return self->end("error", "connect: " + ec.message());
            beast::error_code ignored;
            beast::get_lowest_layer(self->conn->stream).set_option(tcp::no_delay(true), ignored);
            self->handshake();
          });
    }

    void handshake() {
      if constexpr (kTls) {
        const std::string& host = c.config_.url.host;
        if (!SSL_set_tlsext_host_name(conn->stream.native_handle(), host.c_str())) {
          return end("error", "TLS: cannot set the server name");
        }
        if (c.config_.verify_tls)
          conn->stream.set_verify_callback(ssl::host_name_verification(host));
        conn->stream.async_handshake(
            ssl::stream_base::client, [self = this->shared_from_this()](beast::error_code ec) {
              if (ec) return self->end("error", "TLS handshake: " + ec.message());
              self->write();
            });
      } else {
        write();
      }
    }

    void write() {
      c.stats_.dispatch_delay_ns.push_back(now_ns() - job.submit_ns);
      net::async_write(conn->stream, net::buffer(job.request),
                       [self = this->shared_from_this()](beast::error_code ec, size_t) {
                         if (ec) return self->retry_or_end(ec);
                         self->read_header();
                       });
    }

    void read_header() {
      parser.emplace();
      http::async_read_header(conn->stream, conn->buffer, *parser,
                              [self = this->shared_from_this()](beast::error_code ec, size_t) {
                                if (ec) return self->retry_or_end(ec);
                                self->on_header();
                              });
    }

    // From here on the body is decoded by hand from raw reads (http_body.h): Beast's parser
    // costs several times more per small SSE chunk.
    void on_header() {
      status = static_cast<int>(parser->get().result_int());
      keep_alive = parser->keep_alive();
      const auto length = parser->content_length();
      body.emplace(parser->chunked() ? BodyDecoder::Framing::kChunked
                   : length          ? BodyDecoder::Framing::kLength
                                     : BodyDecoder::Framing::kUntilClose,
                   length.value_or(0));
      parser.reset();
      const auto leftover = conn->buffer.data();
      const std::string_view bytes(static_cast<const char*>(leftover.data()), leftover.size());
      const std::string copy(bytes);
      conn->buffer.consume(conn->buffer.size());
      on_bytes(copy, now_ns(), {});
    }

    void read_body() {
      conn->stream.async_read_some(
          net::buffer(buf), [self = this->shared_from_this()](beast::error_code ec, size_t n) {
            const int64_t t = now_ns();
            self->on_bytes(std::string_view(self->buf.data(), n), t, ec);
            self->c.stats_.busy_ns += now_ns() - t;
          });
    }

    void on_bytes(std::string_view bytes, int64_t t, beast::error_code ec) {
      if (finished) return;
      received_any = received_any || !bytes.empty();
      c.stats_.bytes += static_cast<int64_t>(bytes.size());
      const bool framed = body->feed(bytes, [&](std::string_view data) {
        if (status == 200) {
          sse.feed(data, [&](std::string_view event) { on_event(event, t); });
        } else if (error_body.size() < kErrorExcerptBytes) {
          error_body.append(data.substr(0, kErrorExcerptBytes - error_body.size()));
        }
      });
      if (finished) return;
      if (!framed) return end("error", "bad response framing: " + body->error());
      if (body->done()) return complete();
      if (ec == net::error::eof && !body->done()) {
        keep_alive = false;
        if (status == 200 && (done_seen || !times.empty())) return complete();
      }
      if (ec) return end("error", "reading the response: " + ec.message());
      read_body();
    }

    void on_event(std::string_view data, int64_t t) {
      ++c.stats_.events;
      StreamChunk ch = read_chunk(data, c.config_.keep_text);
      if (ch.kind == ChunkKind::kDone) {
        done_seen = true;
        return;
      }
      if (ch.kind == ChunkKind::kError) {
        server_error = ch.error.empty() ? "an error event" : ch.error;
        return;
      }
      if (ch.prompt_tokens) usage_prompt = ch.prompt_tokens;
      int delta = -1;
      if (ch.completion_tokens) {
        delta = *ch.completion_tokens - std::max(usage_completion.value_or(0), 0);
        usage_completion = ch.completion_tokens;
      }
      if (!ch.finish_reason.empty()) finish_reason = ch.finish_reason;
      const bool counted =
          ch.kind == ChunkKind::kContent || (ch.kind == ChunkKind::kEmpty && delta > 0);
      if (!counted) return;
      times.push_back(t);
      text_bytes.push_back(ch.text_bytes);
      deltas.push_back(ch.kind == ChunkKind::kUsageOnly ? -1 : delta);
      if (c.config_.keep_text) text += ch.text;
    }

    void complete() {
      if (status != 200) {
        return end("error", fmt::format("HTTP {}: {}", status, error_body));
      }
      if (!server_error.empty()) return end("error", "server error event: " + server_error);
      if (!done_seen && times.empty()) return end("error", "the stream ended with no token");
      const bool keep = keep_alive && body->done() && sse.idle();
      end(finish_reason.empty() ? "length" : finish_reason, "", keep);
    }

    void retry_or_end(beast::error_code ec) {
      if (finished) return;
      if (reused && !received_any && !retried && is_stale(ec)) {
        retried = true;  // the server closed the pooled connection: not a retry of the request
        reused = false;
        ++c.stats_.stale_reconnects;
        conn.reset();
        return connect();
      }
      end("error", ec.message());
    }

    // Ends the exchange once; an error message makes it a failure.
    void end(const std::string& reason, const std::string& error, bool reuse_connection = false) {
      if (finished) return;
      finished = true;
      deadline.cancel();
      if (reuse_connection) {
        c.idle_.push_back(std::move(conn));
      } else if (conn) {
        beast::error_code ignored;
        beast::get_lowest_layer(conn->stream).close(ignored);
      }
      c.finish(*this, reason, error);
    }

    ClientImpl& c;
    ClientJob job;
    net::steady_timer deadline;
    std::unique_ptr<Conn> conn;
    bool reused = false;
    bool retried = false;
    bool finished = false;
    bool received_any = false;
    bool done_seen = false;
    int status = 0;
    std::optional<http::response_parser<http::empty_body>> parser;  // the header only
    std::optional<BodyDecoder> body;
    bool keep_alive = false;
    std::array<char, 16384> buf{};
    SseParser sse;
    std::string error_body;
    std::string server_error;
    std::string finish_reason;
    std::optional<int> usage_prompt;
    std::optional<int> usage_completion;
    std::vector<int64_t> times;  // per counted chunk
    std::vector<size_t> text_bytes;
    std::vector<int> deltas;
    std::string text;
  };

  void finish(Exchange& ex, const std::string& reason, const std::string& error) {
    auto keep = live_[ex.job.id];  // hold the exchange until we are done with it
    live_.erase(ex.job.id);
    ClientCompletion done;
    done.id = ex.job.id;
    RequestOutcome& o = done.outcome;
    o.ok = error.empty();
    o.error = error;
    o.finish_reason = reason;
    o.prompt_tokens = ex.usage_prompt.value_or(0);
    const int total = ex.usage_completion.value_or(static_cast<int>(ex.times.size()));
    o.output_tokens = o.ok ? total : static_cast<int>(ex.times.size());
    const std::vector<int> tokens = apportion_tokens(ex.text_bytes, ex.deltas, total);
    for (size_t i = 0; i < ex.times.size(); ++i) done.chunks.emplace_back(ex.times[i], tokens[i]);
    o.time_ns = ex.times.empty() ? now_ns() : ex.times.back();
    if (o.ok) {
      if (ex.usage_completion) {
        ++stats_.with_usage;
        if (*ex.usage_completion != ex.job.output_len) ++stats_.output_mismatch;
        if (ex.usage_prompt && ex.job.input_len > 0 && *ex.usage_prompt != ex.job.input_len) {
          ++stats_.input_mismatch;
        }
      } else {
        ++stats_.without_usage;
      }
    }
    done.text = std::move(ex.text);
    done_(std::move(done));
  }

  net::io_context& io_;
  ssl::context* ssl_;
  tcp::resolver::results_type endpoints_;
  ClientConfig config_;
  ClientStats& stats_;
  DoneFn done_;
  std::unordered_map<uint64_t, std::shared_ptr<Exchange>> live_;
  std::vector<std::unique_ptr<Conn>> idle_;
};

}  // namespace

std::unique_ptr<Client> make_client(net::io_context& io, ssl::context* ssl_ctx,
                                    tcp::resolver::results_type endpoints, ClientConfig config,
                                    ClientStats& stats, Client::DoneFn done) {
  if (config.url.tls) {
    return std::make_unique<ClientImpl<ssl::stream<tcp::socket>>>(
        io, ssl_ctx, std::move(endpoints), std::move(config), stats, std::move(done));
  }
  return std::make_unique<ClientImpl<tcp::socket>>(io, ssl_ctx, std::move(endpoints),
                                                   std::move(config), stats, std::move(done));
}

}  // namespace ib::detail
