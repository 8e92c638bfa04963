// Hand-written matchers for the split regexes of byte-level BPE tokenizers (pretokenize.h).
// Each matcher tries the regex's alternatives in order at a position, as a backtracking regex
// engine would, and returns the match length in characters.
#include "model/detail/pretokenize.h"

#include <array>
#include <utility>

namespace ib::detail {
namespace {

enum class Cls : uint8_t { kLetter, kNumber, kSpace, kOther };

struct Char {
  char32_t cp = 0;
  uint32_t offset = 0;  // byte offset in the text
  Cls cls = Cls::kOther;
};

constexpr std::array<std::pair<char32_t, char32_t>, 10> kSpaces = {{
    {0x09, 0x0D},
    {0x20, 0x20},
    {0x85, 0x85},
    {0xA0, 0xA0},
    {0x1680, 0x1680},
    {0x2000, 0x200A},
    {0x2028, 0x2029},
    {0x202F, 0x202F},
    {0x205F, 0x205F},
    {0x3000, 0x3000},
}};
constexpr std::array<std::pair<char32_t, char32_t>, 16> kNumbers = {{
    {'0', '9'},
    {0xB2, 0xB3},
    {0xB9, 0xB9},
    {0xBC, 0xBE},
    {0x660, 0x669},
    {0x6F0, 0x6F9},
    {0x966, 0x96F},
    {0x9E6, 0x9EF},
    {0xE50, 0xE59},
    {0x2070, 0x2070},
    {0x2074, 0x2079},
    {0x2080, 0x2089},
    {0x2150, 0x2189},
    {0x2460, 0x249B},
    {0x3021, 0x3029},
    {0xFF10, 0xFF19},
}};
constexpr std::array<std::pair<char32_t, char32_t>, 30> kLetters = {{
    {'A', 'Z'},       {'a', 'z'},       {0xAA, 0xAA},     {0xB5, 0xB5},     {0xBA, 0xBA},
    {0xC0, 0xD6},     {0xD8, 0xF6},     {0xF8, 0x2C1},    {0x2C6, 0x2D1},   {0x2E0, 0x2E4},
    {0x370, 0x373},   {0x376, 0x3FF},   {0x400, 0x481},   {0x48A, 0x52F},   {0x531, 0x587},
    {0x5D0, 0x5F2},   {0x620, 0x64A},   {0x671, 0x6D3},   {0x900, 0x963},   {0x971, 0xDFF},
    {0xE01, 0xE4E},   {0x10A0, 0x11FF}, {0x1E00, 0x1FBC}, {0x3041, 0x3096}, {0x30A1, 0x30FA},
    {0x3400, 0x4DBF}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0xFF21, 0xFF3A}, {0x20000, 0x2FFFF},
}};

template <size_t N>
bool in(const std::array<std::pair<char32_t, char32_t>, N>& ranges, char32_t cp) {
  for (const auto& [lo, hi] : ranges) {
    if (cp >= lo && cp <= hi) return true;
  }
  return false;
}

Cls classify(char32_t cp) {
  if (cp < 0x80) {  // fast path
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return Cls::kLetter;
    if (cp >= '0' && cp <= '9') return Cls::kNumber;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return Cls::kSpace;
    return Cls::kOther;
  }
  if (in(kSpaces, cp)) return Cls::kSpace;
  if (in(kNumbers, cp)) return Cls::kNumber;
  if (in(kLetters, cp) || (cp >= 0xFF41 && cp <= 0xFF5A)) return Cls::kLetter;
  return Cls::kOther;
}

std::vector<Char> decode(std::string_view s) {
  std::vector<Char> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80    ? 1
                       : c >= 0xF5 ? 0
                       : c >= 0xF0 ? 4
                       : c >= 0xE0 ? 3
                       : c >= 0xC2 ? 2
                                   : 0;
    char32_t cp = c;
    bool ok = len > 0 && i + len <= s.size();
    if (ok && len > 1) {
      cp = c & (0xFF >> (len + 1));
      for (size_t k = 1; k < len && ok; ++k) {
        const auto cc = static_cast<unsigned char>(s[i + k]);
        ok = (cc & 0xC0) == 0x80;
        cp = (cp << 6) | (cc & 0x3F);
      }
    }
    if (!ok) {
      out.push_back(Char{0xFFFD, static_cast<uint32_t>(i), Cls::kOther});
      ++i;
      continue;
    }
    out.push_back(Char{cp, static_cast<uint32_t>(i), classify(cp)});
    i += len;
  }
  return out;
}

class Matcher {
 public:
  Matcher(const std::vector<Char>& chars, SplitPattern pattern) : c_(chars), p_(pattern) {}

  // Length in characters of the match at i (always >= 1: every character is covered).
  size_t match(size_t i) const {
    if (size_t n = contraction(i)) return n;
    if (p_ == SplitPattern::kGpt2) {
      if (size_t n = space_then_run(i, Cls::kLetter)) return n;
      if (size_t n = space_then_run(i, Cls::kNumber)) return n;
      if (size_t n = space_then_run(i, Cls::kOther)) return n;
    } else {
      if (size_t n = prefixed_letters(i)) return n;
      if (is(i, Cls::kNumber)) return run(i, Cls::kNumber, p_ == SplitPattern::kLlama3 ? 3 : 1);
      if (size_t n = space_then_run(i, Cls::kOther)) return n + newlines(i + n);
      if (size_t n = spaces_to_newline(i)) return n;
    }
    const size_t spaces = run(i, Cls::kSpace, SIZE_MAX);
    if (spaces == 0) return 1;  // unreachable: every class is covered above
    if (i + spaces == c_.size() || spaces == 1) return spaces;  // \s+(?!\S) or \s+
    return spaces - 1;  // \s+(?!\S): leave the last space to prefix the next piece
  }

 private:
  bool is(size_t i, Cls cls) const { return i < c_.size() && c_[i].cls == cls; }
  char32_t at(size_t i) const { return i < c_.size() ? c_[i].cp : 0; }

  size_t run(size_t i, Cls cls, size_t max) const {
    size_t n = 0;
    while (n < max && is(i + n, cls)) ++n;
    return n;
  }

  // 's|'t|'re|'ve|'m|'ll|'d, case-insensitive except for GPT-2.
  size_t contraction(size_t i) const {
    if (at(i) != '\'') return 0;
    auto lower = [&](size_t k) -> char32_t {
      const char32_t cp = at(k);
      return p_ != SplitPattern::kGpt2 && cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    };
    const char32_t a = lower(i + 1);
    const char32_t b = lower(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    return 0;
  }

  // " ?X+" where X is cls.
  size_t space_then_run(size_t i, Cls cls) const {
    const size_t lead = at(i) == ' ' && is(i + 1, cls) ? 1 : 0;
    const size_t n = run(i + lead, cls, SIZE_MAX);
    return n == 0 ? 0 : lead + n;
  }

  // [^\r\n\p{L}\p{N}]?\p{L}+
  size_t prefixed_letters(size_t i) const {
    if (is(i, Cls::kLetter)) return run(i, Cls::kLetter, SIZE_MAX);
    const bool prefix = i < c_.size() && at(i) != '\r' && at(i) != '\n' &&
                        c_[i].cls != Cls::kNumber && is(i + 1, Cls::kLetter);
    return prefix ? 1 + run(i + 1, Cls::kLetter, SIZE_MAX) : 0;
  }

  size_t newlines(size_t i) const {
    size_t n = 0;
    while (at(i + n) == '\r' || at(i + n) == '\n') ++n;
    return n;
  }

  // \s*[\r\n]+: through the last newline of the whitespace run.
  size_t spaces_to_newline(size_t i) const {
    const size_t spaces = run(i, Cls::kSpace, SIZE_MAX);
    for (size_t n = spaces; n > 0; --n) {
      if (at(i + n - 1) == '\r' || at(i + n - 1) == '\n') return n;
    }
    return 0;
  }

  const std::vector<Char>& c_;
  SplitPattern p_;
};

}  // namespace

std::optional<SplitPattern> split_pattern_of(std::string_view regex) {
  if (regex == kGpt2Regex) return SplitPattern::kGpt2;
  if (regex == kLlama3Regex) return SplitPattern::kLlama3;
  if (regex == kQwen2Regex) return SplitPattern::kQwen2;
  return std::nullopt;
}

std::vector<std::string_view> split_pieces(std::string_view text, SplitPattern pattern) {
  const std::vector<Char> chars = decode(text);
  const Matcher m(chars, pattern);
  std::vector<std::string_view> pieces;
  size_t i = 0;
  while (i < chars.size()) {
    const size_t n = m.match(i);
    const size_t begin = chars[i].offset;
    const size_t end = i + n < chars.size() ? chars[i + n].offset : text.size();
    pieces.push_back(text.substr(begin, end - begin));
    i += n;
  }
  return pieces;
}

}  // namespace ib::detail
