// The template interpreter: walks the parsed statements with a chain of scopes (a for loop and a
// macro call open one; if does not, as in Jinja), evaluating expressions with Python's rules.
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "model/detail/jinja_ast.h"
#include "model/detail/jinja_builtins.h"

namespace ib::detail::jinja {
namespace {

using K = Value::Kind;
using EK = Expr::Kind;
using SK = Stmt::Kind;

// Rendered output past this size is refused (a loop over range() cannot fill memory).
constexpr size_t kMaxOutputBytes = 64u << 20;
constexpr int kMaxCallDepth = 64;
// Statements and expressions evaluated per render, past which a template is taken to loop away.
constexpr int64_t kMaxSteps = 20'000'000;

struct Scope {
  Dict vars;
  Scope* parent = nullptr;

  Value* find(const std::string& name) {
    for (Scope* s = this; s; s = s->parent) {
      for (auto& [k, v] : s->vars) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, old] : vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  explicit Renderer(const Dict& globals) {
    root_.vars = globals;
    add_globals(root_.vars);
  }

  std::string run(const Program& p) {
    std::string out;
    exec(p.body, root_, out);
    return out;
  }

 private:
  Flow exec(const Body& body, Scope& scope, std::string& out) {
    for (const auto& s : body) {
      const Flow f = exec(*s, scope, out);
      if (f != Flow::kNormal) return f;
      if (out.size() > kMaxOutputBytes) render_error(s->pos, "the rendered text exceeds 64 MiB");
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s, Scope& scope, std::string& out) {
    step(s.pos);
    switch (s.kind) {
      case SK::kText:
        out += s.text;
        return Flow::kNormal;
      case SK::kOutput:
        out += to_str(eval(*s.expr, scope));
        return Flow::kNormal;
      case SK::kIf:
        return exec(truthy(eval(*s.expr, scope)) ? s.body : s.orelse, scope, out);
      case SK::kFor:
        exec_for(s, scope, out);
        return Flow::kNormal;
      case SK::kSet:
        exec_set(s, scope);
        return Flow::kNormal;
      case SK::kMacro:
        define_macro(s, scope);
        return Flow::kNormal;
      case SK::kBreak:
        return Flow::kBreak;
      case SK::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  static void bind(const std::vector<std::string>& targets, const Value& v, Scope& scope,
                   SourcePos pos) {
    if (targets.size() == 1) {
      scope.set(targets[0], v);
      return;
    }
    if (!v.is(K::kList) || v.list->size() != targets.size()) {
      render_error(
          pos, fmt::format("cannot unpack a {} into {} names", kind_name(v.kind), targets.size()));
    }
    for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], (*v.list)[i]);
  }

  void exec_for(const Stmt& s, Scope& outer, std::string& out) {
    Scope scope{{}, &outer};
    List items;
    for (Value& item : iterate(eval(*s.expr, outer), s.pos)) {
      if (s.filter) {
        bind(s.targets, item, scope, s.pos);
        if (!truthy(eval(*s.filter, scope))) continue;
      }
      items.push_back(std::move(item));
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      const auto at = [&](int64_t j) {
        return j >= 0 && j < n ? items[static_cast<size_t>(j)] : Value{};
      };
      scope.set("loop", Value::of(Dict{{"index0", Value::of(i)},
                                       {"index", Value::of(i + 1)},
                                       {"revindex0", Value::of(n - i - 1)},
                                       {"revindex", Value::of(n - i)},
                                       {"first", Value::of(i == 0)},
                                       {"last", Value::of(i == n - 1)},
                                       {"length", Value::of(n)},
                                       {"previtem", at(i - 1)},
                                       {"nextitem", at(i + 1)}}));
      bind(s.targets, items[static_cast<size_t>(i)], scope, s.pos);
      if (exec(s.body, scope, out) == Flow::kBreak) break;
    }
    if (items.empty()) exec(s.orelse, scope, out);
  }

  void exec_set(const Stmt& s, Scope& scope) {
    Value v;
    if (s.expr) {
      v = eval(*s.expr, scope);
    } else {
      std::string captured;
      exec(s.body, scope, captured);
      v = Value::of(std::move(captured));
    }
    if (s.attribute.empty()) return bind(s.targets, v, scope, s.pos);
    Value* ns = scope.find(s.targets[0]);
    if (!ns || !ns->is_namespace) {
      render_error(s.pos, fmt::format("cannot set '{}.{}': '{}' is not a namespace()", s.targets[0],
                                      s.attribute, s.targets[0]));
    }
    for (auto& [k, old] : *ns->dict) {
      if (k == s.attribute) {
        old = std::move(v);
        return;
      }
    }
    ns->dict->emplace_back(s.attribute, std::move(v));
  }

  void define_macro(const Stmt& s, Scope& scope) {
    const Stmt* macro = &s;
    scope.set(s.text, Value::function([this, macro](Args& a) {
                if (++depth_ > kMaxCallDepth) render_error(a.pos, "macro calls nested too deep");
                Scope frame{{}, &root_};
                for (size_t i = 0; i < macro->targets.size(); ++i) {
                  Value v = a.get(i, macro->targets[i]);
                  if (v.is(K::kUndefined) && macro->defaults[i])
                    v = eval(*macro->defaults[i], frame);
                  frame.set(macro->targets[i], std::move(v));
                }
                std::string out;
                exec(macro->body, frame, out);
                --depth_;
                return Value::of(std::move(out));
              }));
  }

  Args eval_args(const Expr& e, size_t first, Scope& scope) {
    Args a;
    a.pos = e.pos;
    const size_t n_keyword = e.keywords.size();
    const size_t n_positional = e.items.size() - first - n_keyword;
    for (size_t i = 0; i < n_positional; ++i)
      a.positional.push_back(eval(*e.items[first + i], scope));
    for (size_t i = 0; i < n_keyword; ++i) {
      a.keyword.emplace_back(e.keywords[i], eval(*e.items[first + n_positional + i], scope));
    }
    return a;
  }

  std::optional<int64_t> slice_bound(const ExprPtr& e, Scope& scope) {
    if (!e) return std::nullopt;
    const Value v = eval(*e, scope);
    if (v.is(K::kNone)) return std::nullopt;
    if (!v.is(K::kInt)) render_error(e->pos, "slice bounds must be integers");
    return v.integer;
  }

  void step(SourcePos pos) {
    if (++steps_ > kMaxSteps) render_error(pos, "the template runs past 20 million steps");
  }

  Value eval(const Expr& e, Scope& scope) {
    step(e.pos);
    switch (e.kind) {
      case EK::kLiteral:
        return e.value;
      case EK::kName: {
        const Value* v = scope.find(e.name);
        return v ? *v : Value{};
      }
      case EK::kList:
      case EK::kTuple: {
        List items;
        for (const auto& item : e.items) items.push_back(eval(*item, scope));
        return Value::of(std::move(items));
      }
      case EK::kDict: {
        Value d = Value::of(Dict{});
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value key = eval(*e.items[i], scope);
          if (!key.is(K::kString)) render_error(e.items[i]->pos, "dict keys must be strings");
          bool replaced = false;
          for (auto& [k, old] : *d.dict) {
            if (k == key.str) {
              old = eval(*e.items[i + 1], scope);
              replaced = true;
            }
          }
          if (!replaced) d.dict->emplace_back(key.str, eval(*e.items[i + 1], scope));
        }
        return d;
      }
      case EK::kAttribute:
        return member(eval(*e.items[0], scope), e.name, e.pos);
      case EK::kSubscript:
        return subscript(eval(*e.items[0], scope), eval(*e.items[1], scope), e.pos);
      case EK::kSlice:
        return slice(eval(*e.items[0], scope), slice_bound(e.items[1], scope),
                     slice_bound(e.items[2], scope), slice_bound(e.items[3], scope), e.pos);
      case EK::kCall: {
        const Value f = eval(*e.items[0], scope);
        if (!f.is(K::kCallable)) {
          const std::string what =
              e.items[0]->kind == EK::kName ? "'" + e.items[0]->name + "'" : "the value";
          render_error(e.pos,
                       fmt::format("{} is not callable (it is {})", what, kind_name(f.kind)));
        }
        Args a = eval_args(e, 1, scope);
        return (*f.callable)(a);
      }
      case EK::kFilter: {
        const Value operand = eval(*e.items[0], scope);
        Args a = eval_args(e, 1, scope);
        return apply_filter(e.name, operand, a);
      }
      case EK::kTest: {
        const Value operand = eval(*e.items[0], scope);
        Args a = eval_args(e, 1, scope);
        return Value::of(apply_test(e.name, operand, a) != e.negated);
      }
      case EK::kUnary:
        return unary(e, eval(*e.items[0], scope));
      case EK::kBinary:
        return binary(e, scope);
      case EK::kConditional:
        if (truthy(eval(*e.items[1], scope))) return eval(*e.items[0], scope);
        return e.items[2] ? eval(*e.items[2], scope) : Value{};
    }
    return Value{};
  }

  static Value unary(const Expr& e, const Value& v) {
    if (e.name == "not") return Value::of(!truthy(v));
    if (v.is(K::kInt)) return Value::of(e.name == "-" ? -v.integer : v.integer);
    if (v.is(K::kFloat)) return Value::of(e.name == "-" ? -v.real : v.real);
    render_error(e.pos, fmt::format("bad operand for unary {}: {}", e.name, kind_name(v.kind)));
  }

  Value binary(const Expr& e, Scope& scope) {
    const std::string& op = e.name;
    const Value a = eval(*e.items[0], scope);
    if (op == "and") return truthy(a) ? eval(*e.items[1], scope) : a;
    if (op == "or") return truthy(a) ? a : eval(*e.items[1], scope);
    const Value b = eval(*e.items[1], scope);
    if (op == "~") return Value::of(to_str(a) + to_str(b));
    if (op == "==") return Value::of(equal(a, b));
    if (op == "!=") return Value::of(!equal(a, b));
    if (op == "in" || op == "not in") {
      if (!b.is(K::kList) && !b.is(K::kDict) && !b.is(K::kString)) {
        render_error(e.pos, fmt::format("'in' needs a list, dict or string on the right, not {}",
                                        kind_name(b.kind)));
      }
      if (b.is(K::kString) && !a.is(K::kString))
        render_error(e.pos, "'in <string>' needs a string on the left");
      Args test_args;
      test_args.pos = e.pos;
      test_args.positional.push_back(b);
      return Value::of(apply_test("in", a, test_args) == (op == "in"));
    }
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      Args test_args;
      test_args.pos = e.pos;
      test_args.positional.push_back(b);
      const char* test = op == "<" ? "lt" : op == "<=" ? "le" : op == ">" ? "gt" : "ge";
      return Value::of(apply_test(test, a, test_args));
    }
    return arithmetic(e, a, b);
  }

  static Value arithmetic(const Expr& e, const Value& a, const Value& b) {
    const std::string& op = e.name;
    if (op == "+" && a.is(K::kString) && b.is(K::kString)) return Value::of(a.str + b.str);
    if (op == "+" && a.is(K::kList) && b.is(K::kList)) {
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::of(std::move(out));
    }
    if (op == "*" && (a.is(K::kString) || a.is(K::kList)) && b.is(K::kInt)) {
      if (b.integer > 0 &&
          (a.is(K::kString) ? a.str.size() : a.list->size()) * static_cast<size_t>(b.integer) >
              kMaxOutputBytes) {
        render_error(e.pos, "a repetition larger than 64 MiB");
      }
      Value out = a.is(K::kString) ? Value::of(std::string()) : Value::of(List{});
      for (int64_t i = 0; i < b.integer; ++i) {
        if (a.is(K::kString)) {
          out.str += a.str;
        } else {
          out.list->insert(out.list->end(), a.list->begin(), a.list->end());
        }
      }
      return out;
    }
    if (!a.is_number() || !b.is_number()) {
      render_error(e.pos, fmt::format("unsupported operand types for {}: {} and {}", op,
                                      kind_name(a.kind), kind_name(b.kind)));
    }
    const bool ints = a.is(K::kInt) && b.is(K::kInt);
    const double x = a.as_double(), y = b.as_double();
    if ((op == "/" || op == "//" || op == "%") && y == 0) render_error(e.pos, "division by zero");
    if (op == "/") return Value::of(x / y);
    if (ints) {
      const int64_t i = a.integer, j = b.integer;
      if (op == "+")
        return Value::of(static_cast<int64_t>(static_cast<uint64_t>(i) + static_cast<uint64_t>(j)));
      if (op == "-")
        return Value::of(static_cast<int64_t>(static_cast<uint64_t>(i) - static_cast<uint64_t>(j)));
      if (op == "*")
        return Value::of(static_cast<int64_t>(static_cast<uint64_t>(i) * static_cast<uint64_t>(j)));
      if (op == "//" || op == "%") {
        if (j == -1)
          return Value::of(op == "%" ? int64_t{0}
                                     : static_cast<int64_t>(0 - static_cast<uint64_t>(i)));
        int64_t q = i / j, r = i % j;
        if (r != 0 && ((r < 0) != (j < 0))) {
          --q;
          r += j;
        }
        return Value::of(op == "//" ? q : r);
      }
      if (op == "**" && j >= 0) return Value::of(static_cast<int64_t>(std::pow(x, y)));
    }
    if (op == "+") return Value::of(x + y);
    if (op == "-") return Value::of(x - y);
    if (op == "*") return Value::of(x * y);
    if (op == "//") return Value::of(std::floor(x / y));
    if (op == "%") return Value::of(x - y * std::floor(x / y));
    return Value::of(std::pow(x, y));
  }

  Scope root_;
  int depth_ = 0;
  int64_t steps_ = 0;
};

}  // namespace

std::string render(const Program& program, const Dict& globals) {
  return Renderer(globals).run(program);
}

}  // namespace ib::detail::jinja
