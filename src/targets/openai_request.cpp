// Request bodies per dialect, base URLs and dialect inference for the HTTP target.
#include <array>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "targets/chat_images.h"
#include "targets/openai_target.h"

namespace ib {
namespace {

using nlohmann::json;

struct DialectFields {
  bool token_ids;         // completions prompts as token ids
  bool ignore_eos;        // vLLM extension
  bool top_k;             // not in the OpenAI API
  bool continuous_usage;  // stream_options.continuous_usage_stats: usage with every chunk
};

DialectFields fields_of(Dialect d) {
  switch (d) {
    case Dialect::kVllm:
      return {true, true, true, true};
    case Dialect::kSglang:
      return {true, true, true, true};
    case Dialect::kLlamaCpp:
      return {true, true, true, false};
    case Dialect::kTgi:
    case Dialect::kOllama:
    case Dialect::kOpenAI:
      return {false, false, false, false};
  }
  return {false, false, false, false};
}

// Text for a token-id prompt where the server takes text only: one common English word per id
// (one token each in GPT-2, Llama-3 and Qwen2 vocabularies), so lengths stay close; the server's
// usage reports the exact count.
std::string synthetic_text(const std::vector<int32_t>& ids) {
  static constexpr std::array<std::string_view, 32> kWords = {
      "the", "of",   "and", "to",   "in",    "is",   "that", "for",  "it",  "as",  "with",
      "was", "on",   "be",  "at",   "by",    "this", "had",  "not",  "are", "but", "from",
      "or",  "have", "an",  "they", "which", "one",  "you",  "were", "all", "we"};
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) text.push_back(' ');
    text += kWords[static_cast<uint32_t>(ids[i]) % kWords.size()];
  }
  return text;
}

bool private_host(const std::string& h) {
  return h == "localhost" || h == "::1" || h == "[::1]" || h.rfind("127.", 0) == 0 ||
         h.rfind("10.", 0) == 0 || h.rfind("192.168.", 0) == 0 || h == "0.0.0.0";
}

}  // namespace

const char* dialect_name(Dialect d) {
  switch (d) {
    case Dialect::kVllm:
      return "vllm";
    case Dialect::kSglang:
      return "sglang";
    case Dialect::kTgi:
      return "tgi";
    case Dialect::kLlamaCpp:
      return "llamacpp";
    case Dialect::kOllama:
      return "ollama";
    case Dialect::kOpenAI:
      return "openai";
  }
  return "?";
}

Result<BaseUrl> parse_base_url(const std::string& url) {
  BaseUrl u;
  std::string rest;
  if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else if (url.rfind("https://", 0) == 0) {
    rest = url.substr(8);
    u.tls = true;
  } else {
    return user_error(fmt::format(
        "--base-url {}: must start with http:// or https://, e.g. http://127.0.0.1:8000", url));
  }
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  u.path_prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!u.path_prefix.empty() && u.path_prefix.back() == '/') u.path_prefix.pop_back();
  if (authority.find('@') != std::string::npos) {
    return user_error(fmt::format(
        "--base-url {}: credentials in the URL are not supported; use --api-key-env", url));
  }
  u.port = u.tls ? "443" : "80";
  const size_t colon = authority.rfind(':');
  if (colon != std::string::npos && authority.find(']', colon) == std::string::npos) {
    u.port = authority.substr(colon + 1);
    authority.resize(colon);
    if (u.port.empty() || u.port.find_first_not_of("0123456789") != std::string::npos ||
        u.port.size() > 5 || std::stoi(u.port) > 65535) {
      return user_error(fmt::format("--base-url {}: bad port", url));
    }
  }
  if (authority.size() > 2 && authority.front() == '[' && authority.back() == ']') {
    authority = authority.substr(1, authority.size() - 2);
  }
  if (authority.empty()) return user_error(fmt::format("--base-url {}: no host", url));
  u.host = authority;
  return u;
}

Result<Dialect> resolve_dialect(const std::string& d, const BaseUrl& url) {
  if (d == "auto") return private_host(url.host) ? Dialect::kVllm : Dialect::kOpenAI;
  for (Dialect x : {Dialect::kVllm, Dialect::kSglang, Dialect::kTgi, Dialect::kLlamaCpp,
                    Dialect::kOllama, Dialect::kOpenAI}) {
    if (d == dialect_name(x)) return x;
  }
  if (d == "inferbench") return Dialect::kVllm;  // our own server speaks vLLM's extensions
  return user_error(fmt::format(
      "--dialect {}: use auto, vllm, sglang, tgi, llamacpp, ollama, openai or inferbench", d));
}

Result<std::string> openai_request_body(const OpenAITargetOptions& o, Dialect dialect,
                                        const RequestSpec& r) {
  const DialectFields f = fields_of(dialect);
  json body = json::object();
  body["model"] = r.lora_name.empty() ? o.model : r.lora_name;  // vLLM: an adapter by name
  std::string text = r.prompt_text;
  if (text.empty() && !(f.token_ids && !o.chat)) text = synthetic_text(r.prompt_tokens);
  // With images, the messages are spliced in as text after the rest is dumped: their data: URLs
  // (megabytes of base64) are copied, not scanned again for JSON escapes on the submit path.
  std::string messages_with_images;
  if (!r.images.empty() && !o.chat) {
    return user_error(fmt::format(
        "request {} holds images and --backend openai sends completions (text only); use "
        "--backend openai-chat",
        r.id));
  }
  if (!r.images.empty()) {
    if (o.image_urls == nullptr) {
      return runtime_error(fmt::format(
          "request {}: its images were not prepared before the run (chat_images.h)", r.id));
    }
    IB_ASSIGN_OR_RETURN(messages_with_images, chat_messages_with_images(text, r, *o.image_urls));
  } else if (o.chat) {
    body["messages"] = json::array({{{"role", "user"}, {"content", text}}});
  } else if (r.prompt_text.empty() && f.token_ids) {
    body["prompt"] = r.prompt_tokens;
  } else {
    body["prompt"] = text;
  }
  body["max_tokens"] = r.output_len;
  body["temperature"] = o.sampling.temperature;
  if (o.sampling.top_p < 1.0f) body["top_p"] = o.sampling.top_p;
  if (o.sampling.top_k > 0 && f.top_k) body["top_k"] = o.sampling.top_k;
  if (o.sampling.temperature > 0) body["seed"] = o.sampling.seed + r.id;
  if (o.ignore_eos && f.ignore_eos) body["ignore_eos"] = true;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (f.continuous_usage) body["stream_options"]["continuous_usage_stats"] = true;
  if (!o.extra_body.empty()) {
    const json extra = json::parse(o.extra_body, nullptr, false);
    if (extra.is_discarded() || !extra.is_object()) {
      return user_error(fmt::format("--extra-body {}: must be a JSON object", o.extra_body));
    }
    body.update(extra);
  }
  std::string dumped = body.dump(-1, ' ', false, json::error_handler_t::replace);
  // --extra-body's "messages" replaces the request's, as for a text request.
  if (messages_with_images.empty() || body.contains("messages")) return dumped;
  std::string out;
  out.reserve(messages_with_images.size() + dumped.size() + 16);
  out += R"({"messages":)";
  out += messages_with_images;
  out += ',';
  out.append(dumped, 1);  // dumped is an object holding at least "model"
  return out;
}

}  // namespace ib
