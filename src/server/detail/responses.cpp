// HTTP responses and OpenAI JSON bodies (responses.h).
#include "server/detail/responses.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ib::detail {
namespace {

using nlohmann::json;

void append_usage(std::string& out, const Usage& u) {
  fmt::format_to(std::back_inserter(out),
                 "{{\"prompt_tokens\":{},\"completion_tokens\":{},\"total_tokens\":{}}}",
                 u.prompt_tokens, u.completion_tokens, u.prompt_tokens + u.completion_tokens);
}

std::string object_id(ApiKind kind, uint64_t id) {
  return fmt::format("{}-{}", kind == ApiKind::kChat ? "chatcmpl" : "cmpl", id);
}

}  // namespace

std::string_view status_text(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

std::string http_response(int status, std::string_view content_type, std::string_view body,
                          bool keep_alive, std::string_view extra_headers) {
  std::string out = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\n{}\r\n",
      status, status_text(status), content_type, body.size(), keep_alive ? "keep-alive" : "close",
      extra_headers);
  out.append(body);
  return out;
}

std::string error_response(const ApiError& error, bool keep_alive, std::string_view extra_headers) {
  return http_response(error.status, "application/json", error_body(error), keep_alive,
                       extra_headers);
}

std::string sse_response_head() {
  return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
         "Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n";
}

void append_http_chunk(std::string& out, std::string_view data) {
  fmt::format_to(std::back_inserter(out), "{:x}\r\n", data.size());
  out.append(data);
  out += "\r\n";
}

StreamFormatter::StreamFormatter(ApiKind kind, uint64_t id, int64_t created_unix_s,
                                 const std::string& model)
    : kind_(kind) {
  head_ = fmt::format(
      "data: {{\"id\":\"{}\",\"object\":\"{}\",\"created\":{},\"model\":", object_id(kind, id),
      kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion", created_unix_s);
  append_json_string(head_, model);
  head_ += ",";
}

void StreamFormatter::role(std::string& out) const {
  out += head_;
  out +=
      "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
      "\"logprobs\":null,\"finish_reason\":null}]}\n\n";
}

void StreamFormatter::token(std::string& out, std::string_view text, const char* finish_reason,
                            const std::optional<Usage>& usage) const {
  out += head_;
  out += kind_ == ApiKind::kChat ? "\"choices\":[{\"index\":0,\"delta\":{\"content\":"
                                 : "\"choices\":[{\"index\":0,\"text\":";
  append_json_string(out, text);
  if (kind_ == ApiKind::kChat) out += "}";
  out += ",\"logprobs\":null,\"finish_reason\":";
  if (finish_reason != nullptr) {
    out += "\"";
    out += finish_reason;
    out += "\"";
  } else {
    out += "null";
  }
  out += "}]";
  if (usage) {
    out += ",\"usage\":";
    append_usage(out, *usage);
  }
  out += "}\n\n";
}

void StreamFormatter::usage(std::string& out, const Usage& u) const {
  out += head_;
  out += "\"choices\":[],\"usage\":";
  append_usage(out, u);
  out += "}\n\n";
}

void StreamFormatter::error(std::string& out, const ApiError& e) const {
  out += "data: ";
  out += error_body(e);
  out += "\n\n";
}

void StreamFormatter::done(std::string& out) {
  out += "data: [DONE]\n\n";
}

std::string completion_body(ApiKind kind, uint64_t id, int64_t created_unix_s,
                            const std::string& model, std::string_view text,
                            const char* finish_reason, const Usage& u) {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
  if (kind == ApiKind::kChat) {
    choice["message"] = {{"role", "assistant"}, {"content", std::string(text)}};
  } else {
    choice["text"] = std::string(text);
  }
  const json body = {
      {"id", object_id(kind, id)},
      {"object", kind == ApiKind::kChat ? "chat.completion" : "text_completion"},
      {"created", created_unix_s},
      {"model", model},
      {"choices", json::array({choice})},
      {"usage",
       {{"prompt_tokens", u.prompt_tokens},
        {"completion_tokens", u.completion_tokens},
        {"total_tokens", u.prompt_tokens + u.completion_tokens}}},
  };
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string models_body(const ServedModel& model, int64_t created_unix_s) {
  json data = json::array({{{"id", model.name},
                            {"object", "model"},
                            {"created", created_unix_s},
                            {"owned_by", "inferbench"},
                            {"root", model.name},
                            {"parent", nullptr},
                            {"max_model_len", model.max_model_len}}});
  for (const ServedLora& l : model.lora_adapters) {  // as vLLM lists them: root is the path
    data.push_back({{"id", l.name},
                    {"object", "model"},
                    {"created", created_unix_s},
                    {"owned_by", "inferbench"},
                    {"root", l.path},
                    {"parent", model.name},
                    {"max_model_len", model.max_model_len}});
  }
  const json body = {{"object", "list"}, {"data", std::move(data)}};
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace ib::detail
