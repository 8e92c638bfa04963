// A connection's generation: validation and tokenization of the call, then each token event
// turned into text (held back while a stop string may still begin), SSE events and usage.
#include <algorithm>
#include <chrono>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include "core/clock.h"
#include "server/detail/chat_prompt.h"
#include "server/detail/http_session.h"

namespace ib::detail {
namespace {

namespace net = boost::asio;

// A client that does not read its stream: past this much unsent output the request is aborted
// (its KV blocks freed) instead of buffering without bound.
constexpr size_t kMaxUnsentBytes = 16u << 20;

// The caller's W3C trace context, when it sent a valid one.
std::optional<TraceContext> traceparent_of(const auto& request) {
  const auto header = request["traceparent"];
  return parse_traceparent(std::string_view(header.data(), header.size()));
}

const char* reason_name(FinishReason r) {
  return r == FinishReason::kStop ? "stop" : r == FinishReason::kLength ? "length" : nullptr;
}

// The call's prompt as token ids: a chat call's messages rendered with the model's template
// (and its images placed), a text prompt encoded, token ids as they are. Thread-safe (reads the
// immutable tokenizer and options only; the image prompter is thread-safe).
std::variant<PromptWithImages, ApiError> prompt_tokens(const GenerationCall& call,
                                                       const ServerCore& core) {
  if (call.kind == ApiKind::kChat) {
    return chat_prompt(call.messages, core.options.chat_format.get(), core.tokenizer,
                       core.options.images.get());
  }
  if (!call.prompt_tokens.empty()) return PromptWithImages{call.prompt_tokens, {}, {}};
  return PromptWithImages{core.tokenizer.encode(call.prompt_text), {}, {}};
}

}  // namespace

void Session::start_generation(ApiKind kind, const Request& req) {
  const int64_t arrival_ns = now_ns();
  if (core_.draining) {
    ApiError e;
    e.status = 503;
    e.type = "service_unavailable";
    e.message = "the server is shutting down and accepts no new requests";
    trace_refused(kind, traceparent_of(req), arrival_ns, e);
    return respond(error_response(e, false), 503, false);
  }
  auto parsed = parse_generation_call(req.body(), kind);
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    trace_refused(kind, traceparent_of(req), arrival_ns, *e);
    return respond(error_response(*e, keep_alive_), e->status, keep_alive_);
  }
  GenerationCall& call = std::get<GenerationCall>(parsed);
  call.kind = kind;
  std::optional<TraceContext> parent = traceparent_of(req);
  // From here the response is open: a drain waits for it (admit_generation closes it on error).
  ++core_.metrics.open_streams;
  state_ = State::kEncoding;
  if (core_.encode_pool == nullptr || (kind != ApiKind::kChat && !call.prompt_tokens.empty())) {
    auto tokens = prompt_tokens(call, core_);
    return admit_generation(std::move(call), std::move(parent), std::move(tokens), arrival_ns);
  }
  // Rendering and tokenizing a long prompt takes milliseconds: never on the I/O thread, which
  // streams every other connection's tokens.
  // The work guard keeps the I/O loop running meanwhile (it may have nothing else to wait for:
  // a drain closes the acceptor).
  net::post(*core_.encode_pool, [self = shared_from_this(), call = std::move(call),
                                 parent = std::move(parent), arrival_ns,
                                 work = net::make_work_guard(core_.io)]() mutable {
    auto tokens = prompt_tokens(call, self->core_);
    net::post(self->core_.io, [self, call = std::move(call), parent = std::move(parent),
                               tokens = std::move(tokens), arrival_ns]() mutable {
      self->admit_generation(std::move(call), std::move(parent), std::move(tokens), arrival_ns);
    });
  });
}

void Session::admit_generation(GenerationCall call, std::optional<TraceContext> parent,
                               std::variant<PromptWithImages, ApiError> encoded,
                               int64_t arrival_ns) {
  const ApiKind kind = call.kind;
  // The response start_generation opened ends here unless the generator takes the call:
  // refused (error), or the server stopped while the prompt was being tokenized (nullptr).
  auto end_unadmitted = [&](const ApiError* e) {
    if (e) trace_refused(kind, parent, arrival_ns, *e);
    --core_.metrics.open_streams;
    if (e && state_ != State::kClosed) {
      respond(error_response(*e, keep_alive_), e->status, keep_alive_);
    }
    if (core_.on_generation_done) core_.on_generation_done();
  };
  if (auto* e = std::get_if<ApiError>(&encoded)) return end_unadmitted(e);
  PromptWithImages prompt = std::move(std::get<PromptWithImages>(encoded));
  std::vector<int32_t>& tokens = prompt.token_ids;
  auto checked =
      check_against_model(call, static_cast<int>(tokens.size()), call.prompt_tokens, core_.served);
  if (auto* e = std::get_if<ApiError>(&checked)) return end_unadmitted(e);
  if (state_ == State::kClosed) return end_unadmitted(nullptr);

  GenerationRequest g;
  g.id = core_.next_id++;
  g.max_tokens = std::get<int>(checked);
  g.sampling.temperature = call.temperature;
  g.sampling.top_p = call.top_p;
  g.sampling.top_k = std::max(call.top_k, 0);
  g.sampling.seed = call.seed ? *call.seed : core_.options.seed + g.id;
  g.ignore_eos = call.ignore_eos;
  if (core_.served.is_adapter(call.model)) g.lora_name = call.model;
  gen_ = Generation{};
  gen_.id = g.id;
  gen_.kind = kind;
  gen_.model = g.lora_name.empty() ? core_.served.name : g.lora_name;
  gen_.stream = call.stream;
  gen_.include_usage = call.include_usage;
  gen_.continuous_usage = call.continuous_usage;
  gen_.stop = std::move(call.stop);
  for (const auto& s : gen_.stop) gen_.max_stop_len = std::max(gen_.max_stop_len, s.size());
  gen_.prompt_len = static_cast<int>(tokens.size());
  gen_.arrival_ns = arrival_ns;
  gen_.timing.max_tokens = g.max_tokens;  // for /metrics too
  if (core_.tracer != nullptr) {
    RequestTiming& t = gen_.timing;
    t.parent = parent;
    t.operation = kind == ApiKind::kChat ? "chat" : "text_completion";
    t.served_model = core_.served.name;
    t.requested_model = gen_.model;
    t.adapter = g.lora_name;
    t.request_id = g.id;
    t.prompt_tokens = gen_.prompt_len;
    t.arrival_ns = arrival_ns;
    t.submitted = true;
  }
  g.prompt_tokens = std::move(tokens);
  g.images = std::move(prompt.images);
  g.mrope_positions = std::move(prompt.mrope_positions);

  state_ = State::kGenerating;
  core_.live[g.id] = shared_from_this();
  if (gen_.stream) {
    core_.count_response(200);
    gen_.format.emplace(kind, g.id, core_.created_unix_s, gen_.model);
    pending_ += sse_response_head();
    if (kind == ApiKind::kChat) {
      std::string event;
      gen_.format->role(event);
      append_http_chunk(pending_, event);
    }
    flush();
  }
  core_.generator.submit(std::move(g));
  watch_disconnect();
}

void Session::on_event(const GenEvent& e) {
  if (state_ != State::kGenerating || gen_.finished) return;
  if (!e.error.empty() || e.token < 0) {
    ApiError err;
    err.status = e.error.empty() ? 500 : 400;
    err.type = e.error.empty() ? "internal_error" : "invalid_request_error";
    err.message = e.error.empty() ? "the engine aborted the request" : e.error;
    return fail_generation(err);
  }
  ServerMetrics& m = core_.metrics;
  if (gen_.generated == 0) {
    m.ttft_s.observe(ns_to_s(e.time_ns - gen_.arrival_ns));
    m.prompt_tokens += static_cast<uint64_t>(gen_.prompt_len);
    gen_.first_token_ns = e.time_ns;
    gen_.timing.step_start_ns = e.step_start_ns;
  } else {
    m.itl_s.observe(ns_to_s(e.time_ns - gen_.last_token_ns));
  }
  gen_.last_token_ns = e.time_ns;
  ++gen_.generated;
  ++m.generation_tokens;
  if (core_.tracer != nullptr) {
    const int64_t start = now_ns();
    gen_.text += core_.tokenizer.decode_continuation({e.token});  // follows the prompt
    RequestTiming& t = gen_.timing;
    if (t.detokenize_first_ns == 0) t.detokenize_first_ns = start;
    t.detokenize_last_ns = now_ns();
    t.detokenize_busy_ns += t.detokenize_last_ns - start;
  } else {
    gen_.text += core_.tokenizer.decode_continuation({e.token});
  }

  const char* reason = reason_name(e.finish);
  if (!gen_.stop.empty()) {
    size_t first = std::string::npos;
    for (const auto& s : gen_.stop) first = std::min(first, gen_.text.find(s, gen_.emitted));
    if (first != std::string::npos) {
      gen_.text.resize(first);
      if (reason == nullptr) core_.generator.abort(gen_.id);  // frees its KV blocks now
      reason = "stop";
    }
  }
  if (reason != nullptr) return finish_generation(reason);
  if (!gen_.stream) return;
  const size_t end = sendable_end();
  std::string event;
  std::optional<Usage> usage;
  if (gen_.continuous_usage) usage = Usage{gen_.prompt_len, gen_.generated};
  gen_.format->token(event, std::string_view(gen_.text).substr(gen_.emitted, end - gen_.emitted),
                     nullptr, usage);
  gen_.emitted = end;
  append_http_chunk(pending_, event);
  if (pending_.size() > kMaxUnsentBytes) return abort_generation("the client does not read");
  flush();
}

size_t Session::sendable_end() const {
  size_t end = gen_.text.size();
  if (gen_.max_stop_len > 1) end = end >= gen_.max_stop_len - 1 ? end - (gen_.max_stop_len - 1) : 0;
  end = std::max(end, gen_.emitted);
  const std::string_view fresh =
      std::string_view(gen_.text).substr(gen_.emitted, end - gen_.emitted);
  return gen_.emitted + complete_utf8_prefix(fresh);
}

void Session::finish_generation(const char* reason) {
  gen_.finished = true;
  auto self = shared_from_this();  // the live map may hold the last reference
  core_.live.erase(gen_.id);
  ServerMetrics& m = core_.metrics;
  ++m.finished[reason];
  m.e2e_s.observe(ns_to_s(now_ns() - gen_.arrival_ns));
  m.request_prompt_tokens.observe(gen_.prompt_len);
  m.request_generation_tokens.observe(gen_.generated);
  m.request_max_tokens.observe(gen_.timing.max_tokens);
  if (gen_.generated > 0) {
    // The first token's step began its prefill (a generator that does not say: at arrival).
    const int64_t step_ns =
        gen_.timing.step_start_ns > 0 ? gen_.timing.step_start_ns : gen_.arrival_ns;
    m.queue_s.observe(ns_to_s(step_ns - gen_.arrival_ns));
    m.prefill_s.observe(ns_to_s(gen_.first_token_ns - step_ns));
    m.inference_s.observe(ns_to_s(gen_.last_token_ns - step_ns));
    m.decode_s.observe(ns_to_s(gen_.last_token_ns - gen_.first_token_ns));
  }
  const Usage usage{gen_.prompt_len, gen_.generated};
  const std::string_view rest = std::string_view(gen_.text).substr(gen_.emitted);
  if (gen_.stream) {
    std::string events;
    std::optional<Usage> chunk_usage;
    if (gen_.continuous_usage) chunk_usage = usage;
    gen_.format->token(events, rest, reason, chunk_usage);
    if (gen_.include_usage) gen_.format->usage(events, usage);
    StreamFormatter::done(events);
    append_http_chunk(pending_, events);
    pending_ += kLastHttpChunk;
  } else {
    core_.count_response(200);
    pending_ += http_response(200, "application/json",
                              completion_body(gen_.kind, gen_.id, core_.created_unix_s, gen_.model,
                                              gen_.text, reason, usage),
                              keep_alive_);
  }
  gen_.emitted = gen_.text.size();
  trace_generation(reason, {}, 200);
  flush();
}

void Session::fail_generation(const ApiError& error) {
  gen_.finished = true;
  auto self = shared_from_this();
  core_.live.erase(gen_.id);
  ++core_.metrics.finished["error"];
  if (gen_.stream) {
    std::string events;
    gen_.format->error(events, error);
    StreamFormatter::done(events);
    append_http_chunk(pending_, events);
    pending_ += kLastHttpChunk;
  } else {
    core_.count_response(error.status);
    pending_ += error_response(error, keep_alive_);
  }
  trace_generation("error", error.message, gen_.stream ? 200 : error.status);
  flush();
}

void Session::trace_generation(const char* finish_reason, std::string error, int http_status) {
  if (core_.tracer == nullptr) return;
  RequestTiming& t = gen_.timing;
  t.output_tokens = gen_.generated;
  t.first_token_ns = gen_.first_token_ns;
  t.last_token_ns = gen_.last_token_ns;
  t.finish_reason = finish_reason;
  t.error = std::move(error);
  t.http_status = http_status;
  t.end_ns = now_ns();
  trace_request(*core_.tracer, t);
}

void Session::trace_refused(ApiKind kind, const std::optional<TraceContext>& parent,
                            int64_t arrival_ns, const ApiError& error) {
  if (core_.tracer == nullptr) return;
  RequestTiming t;
  t.parent = parent;
  t.operation = kind == ApiKind::kChat ? "chat" : "text_completion";
  t.served_model = core_.served.name;
  t.requested_model = core_.served.name;
  t.arrival_ns = arrival_ns;
  t.finish_reason = "error";
  t.error = error.message;
  t.http_status = error.status;
  t.end_ns = now_ns();
  trace_request(*core_.tracer, t);
}

}  // namespace ib::detail
