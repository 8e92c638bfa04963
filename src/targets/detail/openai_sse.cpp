// Reading streamed OpenAI chunks (openai_sse.h).
#include "targets/detail/openai_sse.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <numeric>

#include <nlohmann/json.hpp>

namespace ib::detail {
namespace {

using nlohmann::json;

// A small JSON reader for the chunks of a stream: it walks one object, decodes only the fields
// the benchmark needs and skips the rest. Several times cheaper than building a DOM per token.
class ChunkScanner {
 public:
  ChunkScanner(std::string_view s, bool keep_text)
      : p_(s.data()), end_(s.data() + s.size()), keep_text_(keep_text) {}

  // Fills c; false when the data is not a JSON object (or nests deeper than kMaxDepth).
  bool read(StreamChunk& c) {
    bool has_choices = false;
    const bool ok = object([&](std::string_view key) {
      if (key == "choices") {
        has_choices = true;
        return choices(c);
      }
      if (key == "usage") return usage(c);
      if (key == "error") {
        if (peek() == 'n') return skip();  // "error": null
        c.kind = ChunkKind::kError;
        return skip();
      }
      return skip();
    });
    if (!ok) return false;
    ws();
    if (p_ != end_) return false;
    if (c.kind == ChunkKind::kError) return true;
    if (!has_choices || !any_choice_) {
      c.kind = ChunkKind::kUsageOnly;
    } else {
      c.kind = c.text_bytes > 0 ? ChunkKind::kContent : ChunkKind::kEmpty;
    }
    return true;
  }

 private:
  static constexpr int kMaxDepth = 64;

  char peek() {
    ws();
    return p_ < end_ ? *p_ : '\0';
  }
  void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool eat(char c) {
    if (peek() != c) return false;
    ++p_;
    return true;
  }

  // {"key": value, ...}; on_member reads the value of each key.
  template <class F>
  bool object(F&& on_member) {
    if (!eat('{') || ++depth_ > kMaxDepth) return false;
    if (eat('}')) return --depth_, true;
    do {
      std::string_view key;
      if (!string_raw(key) || !eat(':') || !on_member(key)) return false;
    } while (eat(','));
    --depth_;
    return eat('}');
  }

  bool choices(StreamChunk& c) {
    if (peek() == 'n') return skip();
    if (!eat('[') || ++depth_ > kMaxDepth) return false;
    if (eat(']')) return --depth_, true;
    bool first = true;
    do {
      if (first) {
        any_choice_ = true;
        if (!choice(c)) return false;
        first = false;
      } else if (!skip()) {
        return false;
      }
    } while (eat(','));
    --depth_;
    return eat(']');
  }

  bool choice(StreamChunk& c) {
    return object([&](std::string_view key) {
      if (key == "text") return text(c);
      if (key == "finish_reason") return nullable_string(c.finish_reason);
      if (key == "delta" || key == "message") {
        if (peek() != '{') return skip();
        return object([&](std::string_view k) { return k == "content" ? text(c) : skip(); });
      }
      return skip();
    });
  }

  bool usage(StreamChunk& c) {
    if (peek() != '{') return skip();
    return object([&](std::string_view key) {
      if (key == "prompt_tokens") return integer(c.prompt_tokens);
      if (key == "completion_tokens") return integer(c.completion_tokens);
      return skip();
    });
  }

  bool text(StreamChunk& c) {
    if (peek() == 'n') return skip();
    std::string decoded;
    if (!string_decoded(decoded)) return false;
    c.text_bytes += decoded.size();
    if (keep_text_) c.text += decoded;
    return true;
  }

  bool nullable_string(std::string& out) {
    if (peek() == 'n') return skip();
    out.clear();
    return string_decoded(out);
  }

  bool integer(std::optional<int>& out) {
    ws();
    const char* start = p_;
    if (p_ < end_ && *p_ == '-') ++p_;
    int64_t v = 0;
    while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
      v = std::min<int64_t>(v * 10 + (*p_ - '0'), int64_t{1} << 40);
      ++p_;
    }
    if (p_ < end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E')) {
      p_ = start;
      return skip();  // not an integer: ignored
    }
    if (p_ == start || (*start == '-' && p_ == start + 1)) return false;
    if (*start != '-' && v <= std::numeric_limits<int>::max()) out = static_cast<int>(v);
    return true;
  }

  // The raw contents of a string (escapes left as they are).
  bool string_raw(std::string_view& out) {
    if (!eat('"')) return false;
    const char* start = p_;
    while (p_ < end_ && *p_ != '"') {
      if (*p_ == '\\' && end_ - p_ < 2) return false;
      p_ += *p_ == '\\' ? 2 : 1;
    }
    if (p_ >= end_) return false;
    out = std::string_view(start, static_cast<size_t>(p_ - start));
    ++p_;
    return true;
  }

  bool string_decoded(std::string& out) {
    std::string_view raw;
    if (!string_raw(raw)) return false;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '\\') {
        out.push_back(raw[i]);
        continue;
      }
      if (++i >= raw.size()) return false;
      switch (raw[i]) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(raw, i + 1, cp)) return false;
          i += 4;
          if (cp >= 0xD800 && cp < 0xDC00 && i + 6 < raw.size() && raw[i + 1] == '\\' &&
              raw[i + 2] == 'u') {
            uint32_t lo = 0;
            if (hex4(raw, i + 3, lo) && lo >= 0xDC00 && lo < 0xE000) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
              i += 6;
            }
          }
          utf8(out, cp);
          break;
        }
        default:
          out.push_back(raw[i]);  // \" \\ \/
      }
    }
    return true;
  }

  static bool hex4(std::string_view s, size_t at, uint32_t& v) {
    if (at + 4 > s.size()) return false;
    v = 0;
    for (size_t k = at; k < at + 4; ++k) {
      const char c = s[k];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) return false;
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return true;
  }

  static void utf8(std::string& out, uint32_t cp) {
    if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;  // a lone surrogate
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  // Any value, without looking inside.
  bool skip() {
    const char c = peek();
    if (c == '{') return object([&](std::string_view) { return skip(); });
    if (c == '[') {
      ++p_;
      if (++depth_ > kMaxDepth) return false;
      if (eat(']')) return --depth_, true;
      do {
        if (!skip()) return false;
      } while (eat(','));
      --depth_;
      return eat(']');
    }
    if (c == '"') {
      std::string_view ignored;
      return string_raw(ignored);
    }
    const char* start = p_;
    while (p_ < end_ && (std::isalnum(static_cast<unsigned char>(*p_)) || *p_ == '-' ||
                         *p_ == '+' || *p_ == '.')) {
      ++p_;
    }
    return p_ > start;
  }

  const char* p_;
  const char* end_;
  bool keep_text_;
  int depth_ = 0;
  bool any_choice_ = false;
};

std::string error_message(std::string_view data) {
  const json doc = json::parse(data.begin(), data.end(), nullptr, false);
  if (!doc.is_object() || !doc.contains("error")) return "an error event";
  const json& err = doc["error"];
  if (err.is_object() && err.contains("message") && err["message"].is_string()) {
    return err["message"].get<std::string>();
  }
  return err.is_string() ? err.get<std::string>() : err.dump();
}

}  // namespace

StreamChunk read_chunk(std::string_view data, bool keep_text) {
  StreamChunk c;
  if (data == "[DONE]") {
    c.kind = ChunkKind::kDone;
    return c;
  }
  if (!ChunkScanner(data, keep_text).read(c)) return StreamChunk{};  // kUnreadable
  if (c.kind == ChunkKind::kError) c.error = error_message(data);
  return c;
}

std::vector<int> apportion_tokens(const std::vector<size_t>& text_bytes,
                                  const std::vector<int>& usage_deltas, int total_tokens) {
  const size_t n = text_bytes.size();
  if (n == 0) return {};
  const bool exact =
      usage_deltas.size() == n &&
      std::all_of(usage_deltas.begin(), usage_deltas.end(), [](int d) { return d >= 0; }) &&
      std::accumulate(usage_deltas.begin(), usage_deltas.end(), 0) == total_tokens;
  if (exact) return usage_deltas;
  std::vector<int> out(n, 1);
  if (total_tokens <= static_cast<int>(n)) return out;
  const size_t bytes = std::accumulate(text_bytes.begin(), text_bytes.end(), size_t{0});
  std::vector<std::pair<double, size_t>> remainders;  // (fractional part, chunk)
  int64_t sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const double share = bytes > 0
                             ? static_cast<double>(total_tokens) *
                                   static_cast<double>(text_bytes[i]) / static_cast<double>(bytes)
                             : static_cast<double>(total_tokens) / static_cast<double>(n);
    const auto whole = static_cast<int>(share);
    out[i] = std::max(1, whole);
    sum += out[i];
    remainders.emplace_back(share - static_cast<double>(whole), i);
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; sum < total_tokens; ++k, ++sum) ++out[remainders[k % n].second];
  while (sum > total_tokens) {  // the floors of 1 overshot: take from the largest chunks
    --*std::max_element(out.begin(), out.end());
    --sum;
  }
  return out;
}

}  // namespace ib::detail
