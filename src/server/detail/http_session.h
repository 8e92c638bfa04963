// One HTTP/1.1 connection: reads requests (keep-alive), routes them, and streams a generation's
// tokens as they arrive. While a generation runs, a read stays posted on the socket, so a client
// that disconnects is seen at once and its request is aborted (its KV blocks freed).
// I/O thread only.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "server/detail/responses.h"
#include "server/detail/server_core.h"
#include "trace/trace.h"

namespace ib::detail {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(boost::asio::ip::tcp::socket socket, ServerCore& core);
  void start();
  // A token, finish or failure of this session's generation (dispatched by id).
  void on_event(const GenEvent& event);
  // Server stop: abort the generation (if any) and close.
  void close();

 private:
  using Request = boost::beast::http::request<boost::beast::http::string_body>;
  // kEncoding: the prompt is being rendered and tokenized on the encode pool.
  enum class State { kReading, kResponding, kEncoding, kGenerating, kAwaitingNext, kClosed };

  struct Generation {
    uint64_t id = 0;
    ApiKind kind = ApiKind::kCompletions;
    std::string model;  // echoed in responses: the served model, or the LoRA adapter asked for
    bool stream = false;
    bool include_usage = false;
    bool continuous_usage = false;
    std::optional<StreamFormatter> format;
    std::vector<std::string> stop;
    size_t max_stop_len = 0;
    int prompt_len = 0;
    int generated = 0;
    std::string text;    // everything generated so far (bytes)
    size_t emitted = 0;  // bytes of text already sent
    int64_t arrival_ns = 0;
    int64_t first_token_ns = 0;
    int64_t last_token_ns = 0;
    bool finished = false;
    RequestTiming
        timing;  // the request's spans (when tracing); its step start and max_tokens always
  };

  void read_request();
  void on_header(boost::beast::error_code ec);
  void on_body(boost::beast::error_code ec);
  void handle(const Request& request);
  void start_generation(ApiKind kind, const Request& request);
  // On the I/O thread once the prompt is tokenized (or refused): the call goes to the generator.
  void admit_generation(GenerationCall call, std::optional<TraceContext> parent,
                        std::variant<PromptWithImages, ApiError> prompt, int64_t arrival_ns);
  // A simple (non-generation) response; the connection continues unless keep_alive is false.
  void respond(std::string response, int status, bool keep_alive);
  void fail_generation(const ApiError& error);
  void finish_generation(const char* reason);
  // Bytes of text that can be sent now: complete UTF-8, and no stop string can still begin.
  size_t sendable_end() const;
  void watch_disconnect();
  void on_watch(boost::beast::error_code ec, size_t bytes);
  void abort_generation(const char* why);
  // Hands a finished, failed or aborted generation's spans to the tracer (if any).
  void trace_generation(const char* finish_reason, std::string error, int http_status);
  // A generation request refused before it reached the generator (503, 400, 404): its span.
  // A span for a request refused before the generator took it (parent: the caller's trace).
  void trace_refused(ApiKind kind, const std::optional<TraceContext>& parent, int64_t arrival_ns,
                     const ApiError& error);
  void flush();
  void on_write(boost::beast::error_code ec);
  void after_response();
  void shutdown();

  boost::beast::tcp_stream stream_;
  ServerCore& core_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  State state_ = State::kReading;
  bool keep_alive_ = true;
  std::string pending_;  // response bytes not yet handed to a write
  std::string writing_;  // the bytes of the write in flight
  bool write_active_ = false;
  bool watch_active_ = false;
  Generation gen_;
};

}  // namespace ib::detail
