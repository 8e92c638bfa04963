// One HTTP/1.1 connection of the server (http_session.h): request reading and routing.
// Generation (streamed tokens, stop strings, usage) is in generation.cpp.
#include "server/detail/http_session.h"

#include <string_view>

#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>

#include <fmt/format.h>

#include "core/clock.h"
#include "server/detail/lora_endpoints.h"
#include "server/detail/tokenize_endpoints.h"

namespace ib::detail {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

constexpr size_t kHeaderLimitBytes = 16 * 1024;

ApiError api_error(int status, std::string message, std::string type, std::string code) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

std::string_view sv(beast::string_view s) {
  return {s.data(), s.size()};
}

bool is_disconnect(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == net::error::eof ||
         ec == net::error::connection_reset || ec == net::error::operation_aborted ||
         ec == beast::error::timeout || ec == net::error::broken_pipe ||
         ec == net::error::bad_descriptor;
}

}  // namespace

Session::Session(net::ip::tcp::socket socket, ServerCore& core)
    : stream_(std::move(socket)), core_(core) {}

void Session::start() {
  beast::error_code ec;
  stream_.socket().set_option(net::ip::tcp::no_delay(true), ec);
  read_request();
}

void Session::read_request() {
  state_ = State::kReading;
  parser_.emplace();
  parser_->body_limit(core_.options.max_body_bytes);
  parser_->header_limit(kHeaderLimitBytes);
  stream_.expires_after(std::chrono::seconds(core_.options.idle_timeout_s));
  http::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void Session::on_header(beast::error_code ec) {
  if (state_ == State::kClosed) return;
  if (!ec) {
    const auto& req = parser_->get();
    const auto length = parser_->content_length();
    if (length && *length > core_.options.max_body_bytes) ec = http::error::body_limit;
    if (!ec && beast::iequals(req[http::field::expect], "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::write(stream_.socket(), net::buffer(kContinue), ec);
      if (ec) return shutdown();
    }
  }
  if (ec) return on_body(ec);
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code e, size_t) { self->on_body(e); });
}

void Session::on_body(beast::error_code ec) {
  if (state_ == State::kClosed) return;
  if (ec == http::error::body_limit) {
    const ApiError e = api_error(
        413, fmt::format("the request body exceeds {} bytes", core_.options.max_body_bytes),
        "invalid_request_error", "request_too_large");
    return respond(error_response(e, false), 413, false);
  }
  if (ec == http::error::header_limit) {
    const ApiError e = api_error(431, "the request headers are too large", "invalid_request_error",
                                 "headers_too_large");
    return respond(error_response(e, false), 431, false);
  }
  if (ec && is_disconnect(ec)) return shutdown();
  if (ec) {
    const ApiError e = api_error(400, "malformed HTTP request: " + ec.message(),
                                 "invalid_request_error", "bad_http");
    return respond(error_response(e, false), 400, false);
  }
  stream_.expires_never();
  handle(parser_->get());
}

void Session::handle(const Request& req) {
  keep_alive_ = req.keep_alive();
  std::string_view path = sv(req.target());
  path = path.substr(0, path.find('?'));
  const bool get = req.method() == http::verb::get;
  const bool post = req.method() == http::verb::post;
  auto not_allowed = [&](const char* allow) {
    const ApiError e = api_error(
        405, fmt::format("{} does not accept {}; use {}", path, sv(req.method_string()), allow),
        "invalid_request_error", "method_not_allowed");
    respond(error_response(e, keep_alive_, fmt::format("Allow: {}\r\n", allow)), 405, keep_alive_);
  };
  const bool api = path.rfind("/v1/", 0) == 0;
  if (api && !core_.options.api_key.empty() &&
      sv(req[http::field::authorization]) != "Bearer " + core_.options.api_key) {
    const ApiError e = api_error(401, "a valid API key is required: Authorization: Bearer <key>",
                                 "invalid_request_error", "invalid_api_key");
    return respond(error_response(e, keep_alive_, "WWW-Authenticate: Bearer\r\n"), 401,
                   keep_alive_);
  }
  if (path == "/health") {
    if (!get) return not_allowed("GET");
    return respond(http_response(200, "text/plain", "", keep_alive_), 200, keep_alive_);
  }
  if (path == "/metrics") {
    if (!get) return not_allowed("GET");
    MetricsContext context{core_.served.name, core_.generator.stats(), std::nullopt,
                           core_.options.vllm_metric_names, std::nullopt};
    if (core_.options.energy_joules) context.energy_joules = core_.options.energy_joules();
    if (core_.tracer != nullptr) context.traces = core_.tracer->stats();
    return respond(http_response(200, "text/plain; version=0.0.4",
                                 render_prometheus(core_.metrics, context), keep_alive_),
                   200, keep_alive_);
  }
  if (path == "/v1/models") {
    if (!get) return not_allowed("GET");
    return respond(http_response(200, "application/json",
                                 models_body(core_.served, core_.created_unix_s), keep_alive_),
                   200, keep_alive_);
  }
  if (path == "/v1/load_lora_adapter" || path == "/v1/unload_lora_adapter") {
    if (!post) return not_allowed("POST");
    auto reply = path == "/v1/load_lora_adapter"
                     ? load_lora_body(req.body(), core_.generator, core_.served)
                     : unload_lora_body(req.body(), core_.generator, core_.served);
    if (auto* e = std::get_if<ApiError>(&reply)) {
      return respond(error_response(*e, keep_alive_), e->status, keep_alive_);
    }
    return respond(http_response(200, "text/plain", std::get<std::string>(reply), keep_alive_), 200,
                   keep_alive_);
  }
  if (path == "/tokenize" || path == "/detokenize") {
    if (!post) return not_allowed("POST");
    auto reply = path == "/tokenize"
                     ? tokenize_body(req.body(), core_.tokenizer, core_.served,
                                     core_.options.chat_format.get(), core_.options.images.get())
                     : detokenize_body(req.body(), core_.tokenizer, core_.served);
    if (auto* e = std::get_if<ApiError>(&reply)) {
      return respond(error_response(*e, keep_alive_), e->status, keep_alive_);
    }
    return respond(
        http_response(200, "application/json", std::get<std::string>(reply), keep_alive_), 200,
        keep_alive_);
  }
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (!post) return not_allowed("POST");
    return start_generation(path == "/v1/completions" ? ApiKind::kCompletions : ApiKind::kChat,
                            req);
  }
  const ApiError e =
      api_error(404, fmt::format("no route for {}", path), "not_found_error", "not_found");
  respond(error_response(e, keep_alive_), 404, keep_alive_);
}

void Session::respond(std::string response, int status, bool keep_alive) {
  core_.count_response(status);
  state_ = State::kResponding;
  if (!keep_alive) keep_alive_ = false;
  pending_ += response;
  flush();
}

void Session::flush() {
  if (write_active_ || pending_.empty() || state_ == State::kClosed) return;
  writing_.swap(pending_);
  pending_.clear();
  write_active_ = true;
  net::async_write(
      stream_, net::buffer(writing_),
      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_write(ec); });
}

void Session::on_write(beast::error_code ec) {
  write_active_ = false;
  writing_.clear();
  if (state_ == State::kClosed) return;
  if (ec) {
    if (state_ == State::kGenerating && !gen_.finished) return abort_generation("write failed");
    return shutdown();
  }
  if (!pending_.empty()) return flush();
  if (state_ == State::kResponding) return after_response();
  if (state_ == State::kGenerating && gen_.finished) {
    --core_.metrics.open_streams;
    gen_ = Generation{};
    if (core_.on_generation_done) core_.on_generation_done();
    after_response();
  }
}

void Session::after_response() {
  if (!keep_alive_) return shutdown();
  if (watch_active_) {
    state_ = State::kAwaitingNext;  // the disconnect watch resumes reading
    return;
  }
  read_request();
}

void Session::watch_disconnect() {
  if (buffer_.size() > 0) return;  // the next request is already here: nothing to watch with
  watch_active_ = true;
  stream_.socket().async_read_some(
      buffer_.prepare(4096),
      [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_watch(ec, n); });
}

void Session::on_watch(beast::error_code ec, size_t bytes) {
  watch_active_ = false;
  if (state_ == State::kClosed) return;
  if (ec) {
    if (state_ == State::kGenerating && !gen_.finished) return abort_generation("disconnected");
    if (state_ == State::kAwaitingNext) return shutdown();
    keep_alive_ = false;  // the response still being written is the last
    return;
  }
  buffer_.commit(bytes);
  if (state_ == State::kAwaitingNext) read_request();
}

void Session::abort_generation(const char* why) {
  if (state_ == State::kGenerating && !gen_.finished) {
    core_.generator.abort(gen_.id);
    trace_generation("abort", fmt::format("aborted: {}", why), gen_.stream ? 200 : 0);
    ++core_.metrics.finished["abort"];
    --core_.metrics.open_streams;
    gen_.finished = true;
    auto self = shared_from_this();  // the live map may hold the last reference
    core_.live.erase(gen_.id);
    shutdown();
    if (core_.on_generation_done) core_.on_generation_done();
    return;
  }
  shutdown();
}

void Session::close() {
  if (state_ == State::kGenerating && !gen_.finished) {
    core_.generator.abort(gen_.id);
    gen_.finished = true;
  }
  shutdown();
}

void Session::shutdown() {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
  stream_.close();
}

}  // namespace ib::detail
