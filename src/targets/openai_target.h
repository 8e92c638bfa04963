// The "openai" and "openai-chat" targets: any OpenAI-compatible server over HTTP(S), streamed.
// One event loop (Boost.Asio, one thread) runs every request: connections are pooled and kept
// alive, each SSE event is stamped on the one clock as it is read, TTFT latches on the first
// content chunk (role-only and empty chunks are skipped), and token counts come from the
// server's usage. No request is retried; a failed one is recorded with its status and an
// excerpt of the body while the run goes on.
//
// The client measures itself: per-event handler time, event-loop lag (a 10 ms ticker), and the
// delay from submit() to the request's first byte; describe_json() reports them and flags a
// benchmark in which the client, not the server, was the bottleneck.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/result.h"
#include "engine/engine.h"
#include "targets/target.h"
#include "trace/trace.h"

namespace ib {

class ChatImageUrls;  // chat_images.h

// Which request fields a server understands (docs in README "Dialects").
enum class Dialect { kVllm, kSglang, kTgi, kLlamaCpp, kOllama, kOpenAI };
const char* dialect_name(Dialect d);

struct BaseUrl {
  bool tls = false;
  std::string host;
  std::string port;         // "80" / "443" unless given
  std::string path_prefix;  // without a trailing '/'
};
// "http://host[:port][/prefix]" or "https://..."; user errors name the flag.
Result<BaseUrl> parse_base_url(const std::string& url);

// "auto" picks vllm for loopback and private hosts, openai (no extension fields) otherwise.
Result<Dialect> resolve_dialect(const std::string& dialect, const BaseUrl& url);

struct OpenAITargetOptions {
  std::string base_url = "http://127.0.0.1:8000";
  std::string endpoint;  // default /v1/completions, or /v1/chat/completions when chat
  bool chat = false;
  std::string model;    // the "model" field
  std::string api_key;  // sent as "Authorization: Bearer"; empty: no header
  std::string dialect = "auto";
  std::string extra_body;  // a JSON object merged into every request body
  double request_timeout_s = 3600;
  SamplingParams sampling;  // temperature, top_p, top_k; seed + request id when sampling
  bool ignore_eos = true;   // sent where the dialect has it
  bool verify_tls = true;
  // --otlp-endpoint: a CLIENT span per request, exported over OTLP, whose context goes to the
  // server in a W3C traceparent header (a server that traces continues the trace). Empty: off.
  TraceOptions trace;
  // Chat: the image_url parts of the requests' images, built before the run (chat_images.h);
  // null: a request with images is refused. Completions never send images.
  std::shared_ptr<const ChatImageUrls> image_urls;
  // Tests: the generated text of each request, before its on_done.
  std::function<void(uint64_t id, const std::string& text)> on_text;
};

// The JSON body of one request in a dialect (exposed for tests and documentation). A chat request
// with images carries them as image_url parts after its text (chat_images.h); a completions
// request with images is a user error naming --backend openai-chat.
Result<std::string> openai_request_body(const OpenAITargetOptions& options, Dialect dialect,
                                        const RequestSpec& request);

// Validates the options (URL, dialect, extra body); setup() connects nothing until requests come.
Result<std::unique_ptr<Target>> make_openai_target(OpenAITargetOptions options);

}  // namespace ib
