// Request parsing and validation for the OpenAI-compatible endpoints (protocol.h).
#include "server/protocol.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ib {

ApiError bad_field(std::string param, std::string message, std::string code) {
  ApiError e;
  e.status = 400;
  e.param = std::move(param);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

namespace {

using nlohmann::json;

ApiError bad(std::string param, std::string message, std::string code = "invalid_value") {
  return bad_field(std::move(param), std::move(message), std::move(code));
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "number";
    case json::value_t::string:
      return "string";
    case json::value_t::array:
      return "array";
    case json::value_t::object:
      return "object";
    default:
      return "value";
  }
}

ApiError wrong_type(const std::string& param, const char* expected, const json& v) {
  return bad(param, fmt::format("'{}' must be {}, got {}", param, expected, type_name(v)),
             "invalid_type");
}

// Each reader leaves `out` untouched when the field is absent or null.
std::optional<ApiError> read_bool(const json& body, const char* key, bool& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return wrong_type(key, "a boolean", *it);
  out = it->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> read_int(const json& body, const char* key, int64_t lo, int64_t hi,
                                 std::optional<int64_t>& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  int64_t v = 0;
  if (it->is_number_unsigned()) {
    const auto u = it->get<uint64_t>();
    v = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
            ? std::numeric_limits<int64_t>::max()
            : static_cast<int64_t>(u);
  } else if (it->is_number_integer()) {
    v = it->get<int64_t>();
  } else {
    return wrong_type(key, "an integer", *it);
  }
  if (v < lo || v > hi) {
    return bad(key, fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, it->dump()));
  }
  out = v;
  return std::nullopt;
}

std::optional<ApiError> read_float(const json& body, const char* key, double lo, double hi,
                                   bool lo_open, float& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return wrong_type(key, "a number", *it);
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || (lo_open && v <= lo) || v > hi) {
    return bad(key, fmt::format("'{}' must be a finite number in {}{}, {}], got {}", key,
                                lo_open ? "(" : "[", lo, hi, it->dump()));
  }
  out = static_cast<float>(v);
  return std::nullopt;
}

std::optional<ApiError> read_token_ids(const json& arr, const std::string& param, size_t limit,
                                       std::vector<int32_t>& out) {
  if (arr.size() > limit) {
    return bad(param, fmt::format("'{}' has {} token ids; at most {} are accepted", param,
                                  arr.size(), limit));
  }
  out.reserve(arr.size());
  for (const json& t : arr) {
    if (!t.is_number_integer() && !t.is_number_unsigned()) {
      return wrong_type(param, "a string or an array of integer token ids", t);
    }
    const int64_t id =
        t.is_number_unsigned()
            ? static_cast<int64_t>(std::min<uint64_t>(t.get<uint64_t>(), uint64_t{1} << 40))
            : t.get<int64_t>();
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
      return bad(param, fmt::format("token id {} in '{}' is out of range", t.dump(), param));
    }
    out.push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

std::optional<ApiError> read_prompt(const json& body, const ParseLimits& limits,
                                    GenerationCall& call) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) {
    return bad("prompt", "'prompt' is required", "missing_required_parameter");
  }
  const json& p = *it;
  if (p.is_string()) {
    call.prompt_text = p.get<std::string>();
    return std::nullopt;
  }
  if (!p.is_array()) return wrong_type("prompt", "a string or an array of token ids", p);
  if (!p.empty() && (p[0].is_string() || p[0].is_array())) {
    if (p.size() != 1) {
      return bad("prompt", "batched prompts are not supported; send one prompt per request",
                 "unsupported");
    }
    if (p[0].is_string()) {
      call.prompt_text = p[0].get<std::string>();
      return std::nullopt;
    }
    return read_token_ids(p[0], "prompt", limits.max_prompt_tokens, call.prompt_tokens);
  }
  return read_token_ids(p, "prompt", limits.max_prompt_tokens, call.prompt_tokens);
}

std::optional<ApiError> read_content(const json& c, const std::string& param, ChatMessage& out) {
  if (c.is_null()) return std::nullopt;
  if (c.is_string()) {
    out.content = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array()) return wrong_type(param, "a string or an array of content parts", c);
  for (size_t i = 0; i < c.size(); ++i) {
    const json& part = c[i];
    if (!part.is_object()) return wrong_type(param, "an array of content parts", part);
    auto type = part.find("type");
    const std::string part_param = fmt::format("{}[{}]", param, i);
    if (type != part.end() && type->is_string() && type->get<std::string>() == "image_url") {
      auto image = part.find("image_url");
      const json* url = image != part.end() && image->is_object() && image->contains("url")
                            ? &(*image)["url"]
                            : nullptr;
      if (url == nullptr || !url->is_string()) {
        return bad(part_param + ".image_url.url",
                   "an image_url part needs \"image_url\": {\"url\": "
                   "\"data:image/png;base64,...\"}",
                   url == nullptr ? "missing_required_parameter" : "invalid_type");
      }
      out.images.push_back(ChatImage{part_param, url->get<std::string>()});
      out.content += kImagePlaceholder;
      continue;
    }
    if (type == part.end() || !type->is_string() || type->get<std::string>() != "text") {
      return bad(part_param, "only content parts of type \"text\" and \"image_url\" are supported",
                 "unsupported");
    }
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) {
      return wrong_type(param + ".text", "a string", text == part.end() ? json() : *text);
    }
    out.content += text->get<std::string>();
  }
  return std::nullopt;
}

std::optional<ApiError> read_messages(const json& body, const ParseLimits& limits,
                                      GenerationCall& call) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) {
    return bad("messages", "'messages' is required", "missing_required_parameter");
  }
  if (!it->is_array()) return wrong_type("messages", "an array", *it);
  if (it->empty()) return bad("messages", "'messages' must not be empty");
  if (it->size() > limits.max_messages) {
    return bad("messages", fmt::format("at most {} messages are accepted", limits.max_messages));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!m.is_object()) return wrong_type(param, "an object", m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return bad(param + ".role", "every message needs a string 'role'",
                 role == m.end() ? "missing_required_parameter" : "invalid_type");
    }
    ChatMessage msg;
    msg.role = role->get<std::string>();
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" &&
        msg.role != "developer" && msg.role != "tool") {
      return bad(param + ".role",
                 fmt::format("unknown role '{}'; use system, developer, user, assistant or tool",
                             msg.role));
    }
    auto content = m.find("content");
    if (content != m.end()) {
      if (auto e = read_content(*content, param + ".content", msg)) return e;
    }
    call.messages.push_back(std::move(msg));
  }
  return std::nullopt;
}

std::optional<ApiError> read_stop(const json& body, const ParseLimits& limits,
                                  GenerationCall& call) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    if (!it->get<std::string>().empty()) call.stop.push_back(it->get<std::string>());
    return std::nullopt;
  }
  if (!it->is_array()) return wrong_type("stop", "a string or an array of strings", *it);
  if (it->size() > limits.max_stop_strings) {
    return bad("stop",
               fmt::format("at most {} stop strings are accepted", limits.max_stop_strings));
  }
  for (const json& s : *it) {
    if (!s.is_string()) return wrong_type("stop", "a string or an array of strings", s);
    if (!s.get<std::string>().empty()) call.stop.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

std::optional<ApiError> read_sampling(const json& body, GenerationCall& call) {
  std::optional<int64_t> v;
  const char* max_key =
      body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (auto e = read_int(body, max_key, 1, std::numeric_limits<int32_t>::max(), v)) return e;
  if (v) call.max_tokens = static_cast<int>(*v);
  if (auto e = read_float(body, "temperature", 0.0, 1e6, false, call.temperature)) return e;
  if (auto e = read_float(body, "top_p", 0.0, 1.0, true, call.top_p)) return e;
  v.reset();
  if (auto e = read_int(body, "top_k", -1, std::numeric_limits<int32_t>::max(), v)) return e;
  if (v) call.top_k = static_cast<int>(*v);
  v.reset();
  if (auto e = read_int(body, "seed", std::numeric_limits<int64_t>::min(),
                        std::numeric_limits<int64_t>::max(), v)) {
    return e;
  }
  if (v) call.seed = static_cast<uint64_t>(*v);
  v.reset();
  if (auto e = read_int(body, "n", 1, 1, v)) {
    e->message = "only n = 1 is supported";
    return e;
  }
  float penalty = 0;  // accepted for compatibility, only at their neutral value
  for (const char* key : {"frequency_penalty", "presence_penalty"}) {
    if (auto e = read_float(body, key, -2.0, 2.0, false, penalty)) return e;
  }
  return std::nullopt;
}

}  // namespace

std::variant<GenerationCall, ApiError> parse_generation_call(std::string_view body, ApiKind kind,
                                                             const ParseLimits& limits) {
  const json doc = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return bad("", "the request body is not valid JSON", "invalid_json");
  }
  if (!doc.is_object()) return wrong_type("body", "a JSON object", doc);
  GenerationCall call;
  call.kind = kind;
  if (auto it = doc.find("model"); it != doc.end() && !it->is_null()) {
    if (!it->is_string()) return wrong_type("model", "a string", *it);
    call.model = it->get<std::string>();
  }
  auto e = kind == ApiKind::kCompletions ? read_prompt(doc, limits, call)
                                         : read_messages(doc, limits, call);
  if (e) return *e;
  if ((e = read_sampling(doc, call))) return *e;
  if ((e = read_stop(doc, limits, call))) return *e;
  if ((e = read_bool(doc, "ignore_eos", call.ignore_eos))) return *e;
  if ((e = read_bool(doc, "stream", call.stream))) return *e;
  if (auto it = doc.find("stream_options"); it != doc.end() && !it->is_null()) {
    if (!it->is_object()) return wrong_type("stream_options", "an object", *it);
    if ((e = read_bool(*it, "include_usage", call.include_usage))) return *e;
    if ((e = read_bool(*it, "continuous_usage_stats", call.continuous_usage))) return *e;
  }
  return call;
}

bool ServedModel::is_adapter(const std::string& asked) const {
  return std::any_of(lora_adapters.begin(), lora_adapters.end(),
                     [&](const ServedLora& l) { return l.name == asked; });
}

bool ServedModel::serves(const std::string& asked) const {
  return asked.empty() || asked == name || is_adapter(asked);
}

ApiError model_not_found(const std::string& asked, const ServedModel& model) {
  std::string served = "'" + model.name + "'";
  for (const ServedLora& l : model.lora_adapters) served += ", '" + l.name + "' (LoRA)";
  ApiError e = bad(
      "model", fmt::format("the model '{}' does not exist; this server serves {}", asked, served),
      "model_not_found");
  e.status = 404;
  e.type = "NotFoundError";
  return e;
}

std::variant<int, ApiError> check_against_model(const GenerationCall& call, int prompt_len,
                                                const std::vector<int32_t>& prompt_tokens,
                                                const ServedModel& model) {
  if (!model.serves(call.model)) return model_not_found(call.model, model);
  for (const int32_t id : prompt_tokens) {
    if (id >= model.vocab_size) {
      return bad("prompt", fmt::format("token id {} is outside the vocabulary (size {})", id,
                                       model.vocab_size));
    }
  }
  if (prompt_len == 0) return bad("prompt", "the prompt is empty after tokenization");
  if (prompt_len >= model.max_model_len) {
    return bad("prompt", fmt::format("the prompt has {} tokens; the context holds {}", prompt_len,
                                     model.max_model_len));
  }
  const int room = model.max_model_len - prompt_len;
  if (!call.max_tokens) return call.kind == ApiKind::kCompletions ? std::min(16, room) : room;
  if (*call.max_tokens > room) {
    return bad("max_tokens",
               fmt::format("max_tokens {} with a {}-token prompt exceeds the context of {} tokens; "
                           "ask for at most {}",
                           *call.max_tokens, prompt_len, model.max_model_len, room));
  }
  return *call.max_tokens;
}

std::string render_chat(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages) {
    out += "<|" + m.role + "|>\n" + m.content + "\n";
  }
  out += "<|assistant|>\n";
  return out;
}

std::string error_body(const ApiError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

size_t complete_utf8_prefix(std::string_view s) {
  // Walk back over at most 3 continuation bytes to the last lead byte.
  size_t i = s.size();
  int back = 0;
  while (i > 0 && back < 4 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++back;
  }
  if (i == 0) return back == 0 ? 0 : s.size();
  const auto lead = static_cast<unsigned char>(s[i - 1]);
  const int need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
  if (lead < 0x80 || need == 0) return s.size();
  return back >= need ? s.size() : i - 1;
}

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          if (c < 0x20) {
            out += "\\u00";
            out.push_back(kHex[c >> 4]);
            out.push_back(kHex[c & 15]);
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    // A multi-byte sequence: copy it when well formed, else write U+FFFD for the lead byte.
    const int len = c >= 0xF5 ? 0 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    bool ok = len > 0 && i + static_cast<size_t>(len) <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      ok = (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0xC0) == 0x80;
    }
    if (ok && len == 3) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);  // overlong, surrogates
    }
    if (ok && len == 4) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
    }
    if (ok) {
      out.append(s.substr(i, static_cast<size_t>(len)));
      i += static_cast<size_t>(len);
    } else {
      out += "\\ufffd";
      ++i;
    }
  }
  out.push_back('"');
}

}  // namespace ib
