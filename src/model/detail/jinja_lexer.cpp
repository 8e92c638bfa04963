// The template lexer: text between tags, with Jinja's whitespace control ({%- -%}, {{- -}}) and
// transformers' options (trim_blocks, lstrip_blocks), and the tokens inside {{ }} and {% %}.
#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "model/detail/jinja_ast.h"

namespace ib::detail::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f';
}
bool is_name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  std::vector<Token> run() {
    bool strip_next = false;    // the previous tag ended with '-'
    bool trim_newline = false;  // the previous tag was a block or comment (trim_blocks)
    while (i_ < src_.size()) {
      const size_t open = find_tag(i_);
      std::string text(src_.substr(i_, open - i_));
      size_t first = 0;
      if (strip_next) {
        while (first < text.size() && is_space(text[first])) ++first;
      } else if (trim_newline && !text.empty() && text[0] == '\n') {
        first = 1;
      }
      size_t last = text.size();
      if (open < src_.size()) {
        const char kind = src_[open + 1];
        const bool minus = open + 2 < src_.size() && src_[open + 2] == '-';
        if (minus) {
          while (last > first && is_space(text[last - 1])) --last;
        } else if (kind != '{') {  // lstrip_blocks: blanks from a line start to the tag
          size_t j = last;
          while (j > 0 && (text[j - 1] == ' ' || text[j - 1] == '\t')) --j;
          if (j == 0 ? i_ == 0 : text[j - 1] == '\n') last = std::max(j, first);
        }
      }
      advance_to(i_);
      if (last > first) push(Token::Kind::kText, text.substr(first, last - first), pos_at(i_));
      if (open >= src_.size()) break;
      advance_to(open);
      const char kind = src_[open + 1];
      i_ = open + 2;
      if (i_ < src_.size() && src_[i_] == '-') ++i_;
      if (kind == '#') {
        const size_t close = src_.find("#}", i_);
        if (close == std::string_view::npos) fail(pos_at(open), "unclosed comment '{#'");
        strip_next = close > i_ && src_[close - 1] == '-';
        trim_newline = true;
        i_ = close + 2;
        continue;
      }
      const SourcePos open_pos = pos_at(open);
      push(kind == '{' ? Token::Kind::kExprOpen : Token::Kind::kStmtOpen, "", open_pos);
      strip_next = lex_inside(kind == '{' ? '}' : '%', open_pos);
      trim_newline = kind == '%';
    }
    push(Token::Kind::kEnd, "", pos_at(src_.size()));
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t j = src_.find('{', from); j != std::string_view::npos; j = src_.find('{', j + 1)) {
      if (j + 1 < src_.size() && (src_[j + 1] == '{' || src_[j + 1] == '%' || src_[j + 1] == '#')) {
        return j;
      }
    }
    return src_.size();
  }

  // Tokens up to the closing "}}" or "%}"; returns whether it was "-}}" / "-%}".
  bool lex_inside(char close, SourcePos open_pos) {
    int depth = 0;  // open brackets of dict literals, so their '}' is not the tag's
    while (true) {
      while (i_ < src_.size() && is_space(src_[i_])) ++i_;
      if (i_ >= src_.size()) {
        fail(open_pos, close == '}' ? "unclosed '{{' (no matching '}}')"
                                    : "unclosed '{%' (no matching '%}')");
      }
      const SourcePos pos = pos_at(i_);
      const char c = src_[i_];
      const auto at = [&](std::string_view s) { return src_.substr(i_, s.size()) == s; };
      const std::string end = std::string(1, close) + "}";
      if (depth == 0 && (at(end) || at("-" + end))) {
        const bool minus = c == '-';
        i_ += minus ? 3 : 2;
        push(close == '}' ? Token::Kind::kExprClose : Token::Kind::kStmtClose, "", pos);
        return minus;
      }
      if (is_name_start(c)) {
        const size_t start = i_;
        while (i_ < src_.size() && is_name_char(src_[i_])) ++i_;
        push(Token::Kind::kName, std::string(src_.substr(start, i_ - start)), pos);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number(pos);
      } else if (c == '\'' || c == '"') {
        lex_string(pos);
      } else {
        static constexpr std::string_view kTwo[] = {"==", "!=", "<=", ">=", "//", "**"};
        std::string op(1, c);
        for (std::string_view t : kTwo) {
          if (at(t)) op = std::string(t);
        }
        if (op.size() == 1 &&
            std::string_view("+-*/%~|.,:()[]{}<>=").find(c) == std::string_view::npos) {
          fail(pos, fmt::format("unexpected character '{}'", c));
        }
        if (op == "{") ++depth;
        if (op == "}") --depth;
        if (depth < 0) fail(pos, "unbalanced '}'");
        i_ += op.size();
        push(Token::Kind::kOp, op, pos);
      }
    }
  }

  void lex_number(SourcePos pos) {
    const size_t start = i_;
    bool real = false;
    while (i_ < src_.size() &&
           (std::isdigit(static_cast<unsigned char>(src_[i_])) || src_[i_] == '_'))
      ++i_;
    if (i_ + 1 < src_.size() && src_[i_] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[i_ + 1]))) {
      real = true;
      ++i_;
      while (i_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[i_]))) ++i_;
    }
    std::string spelling;
    for (char ch : src_.substr(start, i_ - start)) {
      if (ch != '_') spelling += ch;
    }
    push(real ? Token::Kind::kFloat : Token::Kind::kInt, spelling, pos);
  }

  void lex_string(SourcePos pos) {
    const char quote = src_[i_++];
    std::string out;
    while (true) {
      if (i_ >= src_.size()) fail(pos, "unterminated string literal");
      const char c = src_[i_++];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= src_.size()) fail(pos, "unterminated string literal");
      const char e = src_[i_++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case '\\':
        case '\'':
        case '"':
          out += e;
          break;
        case '\n':
          break;  // a backslash-newline continues the literal
        default:  // Python keeps unknown escapes as written
          out += '\\';
          out += e;
      }
    }
    push(Token::Kind::kString, std::move(out), pos);
  }

  SourcePos pos_at(size_t offset) {
    advance_to(offset);
    return pos_;
  }
  // Line and column of offset, counted forward from the last position asked for.
  void advance_to(size_t offset) {
    if (offset < scanned_) {
      scanned_ = 0;
      pos_ = SourcePos{};
    }
    for (; scanned_ < offset && scanned_ < src_.size(); ++scanned_) {
      const unsigned char c = static_cast<unsigned char>(src_[scanned_]);
      if (c == '\n') {
        ++pos_.line;
        pos_.column = 1;
      } else if ((c & 0xC0) != 0x80) {  // count characters, not UTF-8 continuation bytes
        ++pos_.column;
      }
    }
  }

  void push(Token::Kind kind, std::string text, SourcePos pos) {
    tokens_.push_back(Token{kind, std::move(text), pos});
  }
  [[noreturn]] static void fail(SourcePos pos, const std::string& what) {
    throw TemplateError(TemplateError::Kind::kSyntax, pos, what);
  }

  std::string_view src_;
  size_t i_ = 0;
  size_t scanned_ = 0;
  SourcePos pos_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) {
  if (!source.empty() && source.back() == '\n') source.remove_suffix(1);  // keep_trailing_newline
  return Lexer(source).run();
}

}  // namespace ib::detail::jinja
