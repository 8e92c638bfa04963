// What the server writes: raw HTTP/1.1 responses, and the OpenAI JSON of completions and chat
// completions, streamed (one SSE event per token) or whole. The per-token path formats strings
// directly from precomputed prefixes: it runs for every token of every stream.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "server/protocol.h"

namespace ib::detail {

std::string_view status_text(int status);

// A complete response with Content-Length; extra_headers are full lines ending in "\r\n".
std::string http_response(int status, std::string_view content_type, std::string_view body,
                          bool keep_alive, std::string_view extra_headers = {});
std::string error_response(const ApiError& error, bool keep_alive,
                           std::string_view extra_headers = {});
// The head of a streamed (chunked) text/event-stream response.
std::string sse_response_head();
// One HTTP chunk around data (non-empty), and the terminating chunk.
void append_http_chunk(std::string& out, std::string_view data);
inline constexpr std::string_view kLastHttpChunk = "0\r\n\r\n";

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
};

// The SSE events of one streamed response.
class StreamFormatter {
 public:
  StreamFormatter(ApiKind kind, uint64_t id, int64_t created_unix_s, const std::string& model);
  // Chat only: the first event, {"delta": {"role": "assistant", "content": ""}}.
  void role(std::string& out) const;
  // One event with text (may be empty); finish_reason null unless given; usage when given.
  void token(std::string& out, std::string_view text, const char* finish_reason,
             const std::optional<Usage>& usage) const;
  // The usage-only event (stream_options.include_usage): "choices": [].
  void usage(std::string& out, const Usage& usage) const;
  void error(std::string& out, const ApiError& error) const;
  static void done(std::string& out);

 private:
  ApiKind kind_;
  std::string head_;  // data: {"id":..,"object":..,"created":..,"model":..,
};

// A whole (non-streamed) response body.
std::string completion_body(ApiKind kind, uint64_t id, int64_t created_unix_s,
                            const std::string& model, std::string_view text,
                            const char* finish_reason, const Usage& usage);
std::string models_body(const ServedModel& model, int64_t created_unix_s);

}  // namespace ib::detail
