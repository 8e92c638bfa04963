// The template parser: recursive descent over the lexer's tokens into jinja_ast.h's trees, with
// Jinja's operator precedence. Statements Jinja has and this subset does not are refused by name.
#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "model/detail/jinja_ast.h"

namespace ib::detail::jinja {
namespace {

using TK = Token::Kind;
using EK = Expr::Kind;
using SK = Stmt::Kind;

// Deeper nesting of blocks or expressions is refused (the parser recurses once per level).
constexpr int kMaxNesting = 200;

// Jinja statements outside the subset: named in the error rather than "unknown".
constexpr std::array<std::string_view, 13> kUnsupportedStatements = {
    "include", "extends", "block",      "call", "filter", "with",         "raw",
    "import",  "from",    "autoescape", "do",   "trans",  "pluralization"};

// Names that end an expression rather than start an argument (`x is defined and y`).
bool is_keyword(const std::string& s) {
  return s == "and" || s == "or" || s == "not" || s == "in" || s == "is" || s == "if" ||
         s == "else";
}

std::string describe(const Token& t) {
  switch (t.kind) {
    case TK::kText:
      return "template text";
    case TK::kExprOpen:
      return "'{{'";
    case TK::kExprClose:
      return "'}}'";
    case TK::kStmtOpen:
      return "'{%'";
    case TK::kStmtClose:
      return "'%}'";
    case TK::kName:
      return fmt::format("'{}'", t.text);
    case TK::kString:
      return "a string";
    case TK::kInt:
    case TK::kFloat:
      return fmt::format("the number {}", t.text);
    case TK::kOp:
      return fmt::format("'{}'", t.text);
    case TK::kEnd:
      return "the end of the template";
  }
  return "?";
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Program run() {
    Program p;
    std::string end;
    p.body = parse_body({}, &end);
    return p;
  }

 private:
  // Statements up to one of the end keywords ("{% endif", "{% else", ...), which is consumed up
  // to and including its name; *which says which one. With no end keywords: to the end.
  Body parse_body(std::initializer_list<std::string_view> ends, std::string* which) {
    Body body;
    while (true) {
      const Token& tok = peek();
      if (tok.kind == TK::kEnd) {
        if (ends.size() == 0) return body;
        fail(tok.pos,
             fmt::format("unexpected end of template: missing '{{% {} %}}'", *(ends.end() - 1)));
      }
      if (tok.kind == TK::kText) {
        auto s = stmt(SK::kText, tok.pos);
        s->text = next().text;
        body.push_back(std::move(s));
      } else if (tok.kind == TK::kExprOpen) {
        auto s = stmt(SK::kOutput, next().pos);
        s->expr = parse_expr();
        expect(TK::kExprClose, "'}}'");
        body.push_back(std::move(s));
      } else {
        const Token& open = next();  // kStmtOpen
        const Token& name = peek();
        if (name.kind != TK::kName)
          fail(name.pos, "expected a statement name after '{%', got " + describe(name));
        if (std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
          *which = next().text;
          return body;
        }
        body.push_back(parse_statement(open.pos));
      }
    }
  }

  // Counts one level of nesting for the lifetime of a parse function's frame.
  struct Nest {
    explicit Nest(Parser& p, SourcePos pos) : parser(p) {
      if (++parser.depth_ > kMaxNesting) fail(pos, "blocks or expressions nested too deeply");
    }
    ~Nest() { --parser.depth_; }
    Parser& parser;
  };

  std::unique_ptr<Stmt> parse_statement(SourcePos pos) {
    const Nest nest(*this, pos);
    const Token& name = next();
    const std::string& s = name.text;
    if (s == "if") return parse_if(pos);
    if (s == "for") return parse_for(pos);
    if (s == "set") return parse_set(pos);
    if (s == "macro") return parse_macro(pos);
    if (s == "generation") return parse_generation(pos);
    if (s == "break" || s == "continue") {
      auto st = stmt(s == "break" ? SK::kBreak : SK::kContinue, pos);
      expect(TK::kStmtClose, "'%}'");
      return st;
    }
    if (std::find(kUnsupportedStatements.begin(), kUnsupportedStatements.end(), s) !=
        kUnsupportedStatements.end()) {
      throw TemplateError(TemplateError::Kind::kUnsupported, pos,
                          fmt::format("the '{{% {} %}}' statement is not supported (supported: "
                                      "if, for, set, macro, break, continue)",
                                      s));
    }
    if (s.rfind("end", 0) == 0 || s == "else" || s == "elif") {
      fail(name.pos, fmt::format("unexpected '{{% {} %}}' with no open block it could close", s));
    }
    fail(name.pos, fmt::format("unknown statement '{}'", s));
  }

  std::unique_ptr<Stmt> parse_if(SourcePos pos) {
    const Nest nest(*this, pos);
    auto st = stmt(SK::kIf, pos);
    st->expr = parse_expr();
    expect(TK::kStmtClose, "'%}'");
    std::string which;
    st->body = parse_body({"elif", "else", "endif"}, &which);
    if (which == "elif") {
      st->orelse.push_back(parse_if(peek().pos));
    } else if (which == "else") {
      expect(TK::kStmtClose, "'%}'");
      st->orelse = parse_body({"endif"}, &which);
      expect(TK::kStmtClose, "'%}'");
    } else {
      expect(TK::kStmtClose, "'%}'");
    }
    return st;
  }

  std::unique_ptr<Stmt> parse_for(SourcePos pos) {
    auto st = stmt(SK::kFor, pos);
    do {
      st->targets.push_back(expect(TK::kName, "a loop variable name").text);
    } while (accept_op(","));
    if (!accept_name("in"))
      fail(peek().pos, "expected 'in' in the for statement, got " + describe(peek()));
    st->expr = parse_or();
    if (accept_name("if")) st->filter = parse_or();
    if (peek().kind == TK::kName && peek().text == "recursive") {
      throw TemplateError(TemplateError::Kind::kUnsupported, peek().pos,
                          "recursive for loops are not supported");
    }
    expect(TK::kStmtClose, "'%}'");
    std::string which;
    st->body = parse_body({"else", "endfor"}, &which);
    if (which == "else") {
      expect(TK::kStmtClose, "'%}'");
      st->orelse = parse_body({"endfor"}, &which);
    }
    expect(TK::kStmtClose, "'%}'");
    return st;
  }

  std::unique_ptr<Stmt> parse_set(SourcePos pos) {
    auto st = stmt(SK::kSet, pos);
    st->targets.push_back(expect(TK::kName, "a variable name").text);
    if (accept_op(".")) {
      st->attribute = expect(TK::kName, "an attribute name").text;
    } else {
      while (accept_op(",")) st->targets.push_back(expect(TK::kName, "a variable name").text);
    }
    if (accept_op("=")) {
      st->expr = parse_tuple_or_expr();
      expect(TK::kStmtClose, "'%}'");
      return st;
    }
    if (st->targets.size() != 1 || !st->attribute.empty()) {
      fail(peek().pos, "expected '=' in the set statement, got " + describe(peek()));
    }
    expect(TK::kStmtClose, "'%}' or '='");
    std::string which;
    st->body = parse_body({"endset"}, &which);
    expect(TK::kStmtClose, "'%}'");
    return st;
  }

  // {% generation %}...{% endgeneration %} (transformers' assistant-mask marker): its body is
  // rendered as if the tags were not there.
  std::unique_ptr<Stmt> parse_generation(SourcePos pos) {
    auto st = stmt(SK::kIf, pos);
    st->expr = expr(EK::kLiteral, pos);
    st->expr->value = Value::of(true);
    expect(TK::kStmtClose, "'%}'");
    std::string which;
    st->body = parse_body({"endgeneration"}, &which);
    expect(TK::kStmtClose, "'%}'");
    return st;
  }

  std::unique_ptr<Stmt> parse_macro(SourcePos pos) {
    auto st = stmt(SK::kMacro, pos);
    st->text = expect(TK::kName, "a macro name").text;
    expect_op("(");
    while (!accept_op(")")) {
      if (!st->targets.empty()) expect_op(",");
      st->targets.push_back(expect(TK::kName, "a parameter name").text);
      st->defaults.push_back(accept_op("=") ? parse_expr() : nullptr);
    }
    expect(TK::kStmtClose, "'%}'");
    std::string which;
    st->body = parse_body({"endmacro"}, &which);
    expect(TK::kStmtClose, "'%}'");
    return st;
  }

  // ---- expressions, lowest precedence first ----

  ExprPtr parse_tuple_or_expr() {
    const SourcePos pos = peek().pos;
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    auto tuple = expr(EK::kTuple, pos);
    tuple->items.push_back(std::move(first));
    while (accept_op(",")) tuple->items.push_back(parse_expr());
    return tuple;
  }

  ExprPtr parse_expr() {
    ExprPtr e = parse_or();
    if (!(peek().kind == TK::kName && peek().text == "if")) return e;
    auto c = expr(EK::kConditional, next().pos);
    c->items.push_back(std::move(e));
    c->items.push_back(parse_or());
    c->items.push_back(accept_name("else") ? parse_expr() : nullptr);
    return c;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (peek().kind == TK::kName && peek().text == "or")
      e = binary("or", std::move(e), &Parser::parse_and);
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (peek().kind == TK::kName && peek().text == "and")
      e = binary("and", std::move(e), &Parser::parse_not);
    return e;
  }
  ExprPtr parse_not() {
    if (peek().kind == TK::kName && peek().text == "not") {
      auto u = expr(EK::kUnary, next().pos);
      u->name = "not";
      u->items.push_back(parse_not());
      return u;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    while (true) {
      const Token& t = peek();
      if (t.kind == TK::kOp && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                t.text == "<=" || t.text == ">" || t.text == ">=")) {
        e = binary(t.text, std::move(e), &Parser::parse_math1);
      } else if (t.kind == TK::kName && t.text == "in") {
        e = binary("in", std::move(e), &Parser::parse_math1);
      } else if (t.kind == TK::kName && t.text == "not" && k_ + 1 < t_.size() &&
                 t_[k_ + 1].kind == TK::kName && t_[k_ + 1].text == "in") {
        next();
        e = binary("not in", std::move(e), &Parser::parse_math1);
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) e = binary(peek().text, std::move(e), &Parser::parse_concat);
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) e = binary("~", std::move(e), &Parser::parse_math2);
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      e = binary(peek().text, std::move(e), &Parser::parse_pow);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary();
    while (is_op("**")) e = binary("**", std::move(e), &Parser::parse_unary);
    return e;
  }
  ExprPtr parse_unary() {
    const Nest nest(*this, peek().pos);
    if (is_op("-") || is_op("+")) {
      auto u = expr(EK::kUnary, peek().pos);
      u->name = next().text;
      u->items.push_back(parse_unary());
      return parse_filters(std::move(u));
    }
    return parse_filters(parse_postfix(parse_primary()));
  }

  // `| filter(args)`, `is [not] test(args)` and calls, left to right.
  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      if (accept_op("|")) {
        auto f = expr(EK::kFilter, peek().pos);
        f->name = expect(TK::kName, "a filter name").text;
        f->items.push_back(std::move(e));
        if (accept_op("(")) parse_args(*f);
        e = std::move(f);
      } else if (peek().kind == TK::kName && peek().text == "is") {
        auto t = expr(EK::kTest, next().pos);
        t->negated = accept_name("not");
        const Token& name = expect(TK::kName, "a test name");
        t->name = name.text;
        t->items.push_back(std::move(e));
        if (accept_op("(")) {
          parse_args(*t);
        } else if (starts_bare_argument()) {
          t->items.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_postfix(std::move(e));
      } else {
        return e;
      }
    }
  }

  bool starts_bare_argument() const {
    const Token& t = peek();
    if (t.kind == TK::kString || t.kind == TK::kInt || t.kind == TK::kFloat) return true;
    if (t.kind == TK::kName) return !is_keyword(t.text);
    return t.kind == TK::kOp && (t.text == "[" || t.text == "{");
  }

  // Arguments after '(' up to and including ')': positional first, then name=value.
  void parse_args(Expr& call) {
    bool first = true;
    while (!accept_op(")")) {
      if (!first) {
        expect_op(",");
        if (accept_op(")")) return;  // trailing comma
      }
      first = false;
      if (peek().kind == TK::kName && k_ + 1 < t_.size() && t_[k_ + 1].kind == TK::kOp &&
          t_[k_ + 1].text == "=") {
        call.keywords.push_back(next().text);
        next();
        call.items.push_back(parse_expr());
      } else {
        if (!call.keywords.empty())
          fail(peek().pos, "a positional argument after a keyword argument");
        call.items.push_back(parse_expr());
      }
    }
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        auto a = expr(EK::kAttribute, next().pos);
        const Token& t = next();
        if (t.kind != TK::kName && t.kind != TK::kInt)
          fail(t.pos, "expected an attribute name after '.', got " + describe(t));
        a->name = t.text;
        a->items.push_back(std::move(e));
        e = std::move(a);
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        auto c = expr(EK::kCall, next().pos);
        c->items.push_back(std::move(e));
        parse_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr e) {
    const SourcePos pos = next().pos;  // '['
    ExprPtr start = is_op(":") ? nullptr : parse_expr();
    if (accept_op("]")) {
      auto s = expr(EK::kSubscript, pos);
      s->items.push_back(std::move(e));
      s->items.push_back(std::move(start));
      return s;
    }
    auto s = expr(EK::kSlice, pos);
    s->items.push_back(std::move(e));
    s->items.push_back(std::move(start));
    expect_op(":");
    s->items.push_back(is_op(":") || is_op("]") ? nullptr : parse_expr());
    s->items.push_back(accept_op(":") && !is_op("]") ? parse_expr() : nullptr);
    expect_op("]");
    return s;
  }

  ExprPtr parse_primary() {
    const Token& t = next();
    switch (t.kind) {
      case TK::kName: {
        auto e = expr(EK::kLiteral, t.pos);
        if (t.text == "true" || t.text == "True") {
          e->value = Value::of(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value::of(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::none();
        } else {
          e->kind = EK::kName;
          e->name = t.text;
        }
        return e;
      }
      case TK::kString: {
        std::string s = t.text;
        while (peek().kind == TK::kString) s += next().text;  // adjacent literals join
        auto e = expr(EK::kLiteral, t.pos);
        e->value = Value::of(std::move(s));
        return e;
      }
      case TK::kInt:
      case TK::kFloat: {
        auto e = expr(EK::kLiteral, t.pos);
        try {
          e->value = t.kind == TK::kInt ? Value::of(static_cast<int64_t>(std::stoll(t.text)))
                                        : Value::of(std::stod(t.text));
        } catch (const std::exception&) {
          fail(t.pos, "number literal out of range: " + t.text);
        }
        return e;
      }
      case TK::kOp:
        if (t.text == "(") return parse_parenthesized(t.pos);
        if (t.text == "[") return parse_sequence(EK::kList, "]", t.pos);
        if (t.text == "{") return parse_dict(t.pos);
        break;
      default:
        break;
    }
    fail(t.pos, "expected an expression, got " + describe(t));
  }

  ExprPtr parse_parenthesized(SourcePos pos) {
    if (accept_op(")")) return expr(EK::kTuple, pos);
    ExprPtr e = parse_expr();
    if (accept_op(")")) return e;
    auto tuple = expr(EK::kTuple, pos);
    tuple->items.push_back(std::move(e));
    while (accept_op(",") && !is_op(")")) tuple->items.push_back(parse_expr());
    expect_op(")");
    return tuple;
  }

  ExprPtr parse_sequence(EK kind, const char* close, SourcePos pos) {
    auto e = expr(kind, pos);
    while (!accept_op(close)) {
      if (!e->items.empty()) expect_op(",");
      if (accept_op(close)) break;
      e->items.push_back(parse_expr());
    }
    return e;
  }

  ExprPtr parse_dict(SourcePos pos) {
    auto e = expr(EK::kDict, pos);
    while (!accept_op("}")) {
      if (!e->items.empty()) expect_op(",");
      if (accept_op("}")) break;
      e->items.push_back(parse_expr());
      expect_op(":");
      e->items.push_back(parse_expr());
    }
    return e;
  }

  // ---- helpers ----

  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr (Parser::*operand)()) {
    auto b = expr(EK::kBinary, next().pos);
    b->name = op;
    b->items.push_back(std::move(left));
    b->items.push_back((this->*operand)());
    return b;
  }
  static ExprPtr expr(EK kind, SourcePos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }
  static std::unique_ptr<Stmt> stmt(SK kind, SourcePos pos) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->pos = pos;
    return s;
  }

  const Token& peek() const { return t_[k_]; }
  const Token& next() {
    const Token& t = t_[k_];
    if (t.kind != TK::kEnd) ++k_;
    return t;
  }
  bool is_op(std::string_view op) const { return peek().kind == TK::kOp && peek().text == op; }
  bool accept_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(std::string_view name) {
    if (peek().kind != TK::kName || peek().text != name) return false;
    next();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!accept_op(op))
      fail(peek().pos, fmt::format("expected '{}', got {}", op, describe(peek())));
  }
  const Token& expect(TK kind, std::string_view what) {
    if (peek().kind != kind)
      fail(peek().pos, fmt::format("expected {}, got {}", what, describe(peek())));
    return next();
  }
  [[noreturn]] static void fail(SourcePos pos, const std::string& what) {
    throw TemplateError(TemplateError::Kind::kSyntax, pos, what);
  }

  std::vector<Token> t_;
  size_t k_ = 0;
  int depth_ = 0;
};

}  // namespace

Program parse(std::string_view source) {
  return Parser(lex(source)).run();
}

}  // namespace ib::detail::jinja
