// tokenizer.json decoders (tokenizer_steps.h). Unlike HF tokenizers, ByteFallback and ByteLevel
// keep bytes that are not valid UTF-8 as they are (no U+FFFD), so text decoded one token at a
// time concatenates to the text decoded whole.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/assert.h"
#include "model/detail/tokenizer_steps.h"

namespace ib::detail {
namespace {

using nlohmann::json;

constexpr std::string_view kSupported =
    "ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, Sequence";

// Decodes one UTF-8 character at s[i]; returns its length (1 for an invalid byte, cp = byte).
size_t next_char(std::string_view s, size_t i, char32_t& cp) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  if (c >= 0x80 && (c < 0xC0 || i + len > s.size())) len = 1;
  cp = len == 1 ? c : static_cast<char32_t>(c & (0x7F >> len));
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
  return len;
}

std::string byte_level_bytes(const std::string& token) {
  static const std::vector<int> inverse = [] {
    std::vector<int> inv(512, -1);
    for (int b = 0; b < 256; ++b) inv[byte_to_codepoint()[static_cast<size_t>(b)]] = b;
    return inv;
  }();
  std::string bytes;
  for (size_t i = 0; i < token.size();) {
    char32_t cp = 0;
    i += next_char(token, i, cp);
    const int b = cp < inverse.size() ? inverse[cp] : -1;
    if (b < 0) return token;  // not a mapped token (an added one): its own bytes
    bytes.push_back(static_cast<char>(b));
  }
  return bytes;
}

// "<0xNN>" to its byte.
std::optional<char> fallback_byte(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return {};
  unsigned value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = token[i];
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                             : -1;
    if (digit < 0) return {};
    value = value * 16 + static_cast<unsigned>(digit);
  }
  return static_cast<char>(value);
}

std::string strip(const std::string& token, const std::string& ch, size_t start, size_t stop) {
  size_t begin = 0;
  size_t end = token.size();
  for (size_t k = 0;
       k < start && end - begin >= ch.size() && token.compare(begin, ch.size(), ch) == 0; ++k) {
    begin += ch.size();
  }
  for (size_t k = 0;
       k < stop && end - begin >= ch.size() && token.compare(end - ch.size(), ch.size(), ch) == 0;
       ++k) {
    end -= ch.size();
  }
  return token.substr(begin, end - begin);
}

void apply(const DecoderStep& step, std::vector<std::string>& tokens, bool continuation) {
  switch (step.kind) {
    case DecoderStep::Kind::kByteLevel:
      for (std::string& t : tokens) t = byte_level_bytes(t);
      break;
    case DecoderStep::Kind::kByteFallback:
      for (std::string& t : tokens) {
        if (auto b = fallback_byte(t)) t = std::string(1, *b);
      }
      break;
    case DecoderStep::Kind::kFuse: {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens.assign(1, std::move(all));
      break;
    }
    case DecoderStep::Kind::kStrip:
      for (std::string& t : tokens) {
        t = strip(t, step.content, continuation ? 0 : step.start, step.stop);
      }
      break;
    case DecoderStep::Kind::kReplace:
      for (std::string& t : tokens) t = step.pattern.replace_all(t, step.content);
      break;
    case DecoderStep::Kind::kMetaspace: {
      Pattern space;
      space.literal = step.content;
      for (size_t i = 0; i < tokens.size(); ++i) {
        std::string t = space.replace_all(tokens[i], " ");
        if (i == 0 && !continuation && step.strip_first_space && !t.empty() && t.front() == ' ')
          t.erase(0, 1);
        tokens[i] = std::move(t);
      }
      break;
    }
  }
}

Status parse_into(const json& node, Decoder& decoder) {
  if (node.is_null()) return Ok{};
  const std::string type = node.is_object() ? node.value("type", "") : "";
  DecoderStep step;
  if (type == "Sequence") {
    for (const json& child : node.value("decoders", json::array())) {
      IB_TRY(parse_into(child, decoder));
    }
    return Ok{};
  }
  if (type == "ByteLevel") {
    step.kind = DecoderStep::Kind::kByteLevel;
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::Kind::kFuse;
  } else if (type == "Strip") {
    step.kind = DecoderStep::Kind::kStrip;
    step.content = node.value("content", " ");
    step.start = node.value("start", size_t{0});
    step.stop = node.value("stop", size_t{0});
    if (step.content.empty()) return user_error("decoder Strip: empty content");
  } else if (type == "Replace") {
    step.kind = DecoderStep::Kind::kReplace;
    IB_ASSIGN_OR_RETURN(step.pattern,
                        parse_pattern(node.value("pattern", json()), "decoder Replace"));
    step.content = node.value("content", "");
  } else if (type == "Metaspace") {
    step.kind = DecoderStep::Kind::kMetaspace;
    step.content = node.value("replacement", "\xE2\x96\x81");
    if (step.content.empty()) step.content = "\xE2\x96\x81";
    step.strip_first_space =
        node.value("prepend_scheme", "always") != "never" && node.value("add_prefix_space", true);
  } else {
    return user_error(fmt::format("decoder '{}' is not supported; inferbench reads {}",
                                  type.substr(0, 64), kSupported));
  }
  decoder.push_back(std::move(step));
  return Ok{};
}

}  // namespace

Result<Decoder> parse_decoder(const json& node) {
  Decoder decoder;
  IB_TRY(parse_into(node, decoder));
  return decoder;
}

std::string decode_tokens(const Decoder& decoder, std::vector<std::string> tokens,
                          bool continuation) {
  for (const DecoderStep& step : decoder) apply(step, tokens, continuation);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

const std::array<char32_t, 256>& byte_to_codepoint() {
  static const std::array<char32_t, 256> map = [] {
    std::array<char32_t, 256> m{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      m[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
    return m;
  }();
  return map;
}

void append_utf8(std::string& out, char32_t cp) {
  IB_ASSERT(cp < 0x800, "append_utf8 covers the byte map's code points (below U+0800)");
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
    return;
  }
  out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
  out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
}

}  // namespace ib::detail
