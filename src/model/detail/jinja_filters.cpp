// Filters and tests of the Jinja subset: those chat templates use, with Jinja's (and
// transformers' tojson) behaviour. Any other name is refused with the list of supported ones.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "model/detail/jinja_builtins.h"

namespace ib::detail::jinja {
namespace {

using K = Value::Kind;

constexpr const char* kFilters =
    "trim, length, count, tojson, upper, lower, capitalize, title, default, d, items, string, "
    "int, float, list, join, first, last, reverse, replace, safe, abs, select, reject, "
    "selectattr, rejectattr, map";
constexpr const char* kTests =
    "defined, undefined, none, string, number, integer, float, boolean, true, false, mapping, "
    "iterable, sequence, callable, odd, even, divisibleby, equalto, eq, ne, lt, le, gt, ge, in, "
    "lower, upper";

int64_t length(const Value& v, SourcePos pos) {
  switch (v.kind) {
    case K::kString:
      return static_cast<int64_t>(characters(v.str).size());
    case K::kList:
      return static_cast<int64_t>(v.list->size());
    case K::kDict:
      return static_cast<int64_t>(v.dict->size());
    case K::kUndefined:
      return 0;
    default:
      render_error(pos, fmt::format("a {} has no length", kind_name(v.kind)));
  }
}

int compare(const Value& a, const Value& b, SourcePos pos) {
  if (a.is_number() && b.is_number()) {
    return a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double() ? 1 : 0;
  }
  if (a.is(K::kString) && b.is(K::kString))
    return a.str.compare(b.str) < 0 ? -1 : a.str == b.str ? 0 : 1;
  render_error(pos,
               fmt::format("cannot order a {} and a {}", kind_name(a.kind), kind_name(b.kind)));
}

// The test named by args[first] (with its argument after it) on v, for select/selectattr.
bool named_test(const Value& v, const Args& args, size_t first) {
  Args test_args;
  test_args.pos = args.pos;
  for (size_t i = first + 1; i < args.positional.size(); ++i)
    test_args.positional.push_back(args.positional[i]);
  if (args.positional.size() <= first) return truthy(v);
  const Value& name = args.positional[first];
  if (!name.is(K::kString)) render_error(args.pos, "a test name must be a string");
  return apply_test(name.str, v, test_args);
}

Value select(const Value& operand, Args& a, bool by_attribute, bool keep) {
  List out;
  for (const Value& item : iterate(operand, a.pos)) {
    Value probe = item;
    if (by_attribute) {
      const Value attr = a.get(0, "attribute");
      if (!attr.is(K::kString)) render_error(a.pos, "selectattr/rejectattr take an attribute name");
      probe = item.is(K::kDict) ? member(item, attr.str, a.pos) : Value{};
    }
    if (named_test(probe, a, by_attribute ? 1 : 0) == keep) out.push_back(item);
  }
  return Value::of(std::move(out));
}

Value to_number(const Value& v, bool integer, const Value& fallback) {
  if (v.is_number())
    return integer ? Value::of(static_cast<int64_t>(v.as_double())) : Value::of(v.as_double());
  if (v.is(K::kBool))
    return integer ? Value::of(int64_t{v.boolean}) : Value::of(v.boolean ? 1.0 : 0.0);
  if (v.is(K::kString)) {
    const char* begin = v.str.c_str();
    char* end = nullptr;
    if (integer) {
      const long long i = std::strtoll(begin, &end, 10);
      if (end != begin && *end == '\0') return Value::of(static_cast<int64_t>(i));
    } else {
      const double d = std::strtod(begin, &end);
      if (end != begin && *end == '\0') return Value::of(d);
    }
  }
  return fallback;
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, Args& a) {
  if (name == "trim") {
    Args strip_args;
    strip_args.pos = a.pos;
    strip_args.positional.push_back(a.get(0, "chars"));
    return v.is(K::kString) ? (*member(v, "strip", a.pos).callable)(strip_args)
                            : Value::of(to_str(v));
  }
  if (name == "length" || name == "count") return Value::of(length(v, a.pos));
  if (name == "tojson") {
    const Value indent = a.get(0, "indent");
    return Value::of(to_json(v, indent.is(K::kInt) ? static_cast<int>(indent.integer) : 0));
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    Args none;
    none.pos = a.pos;
    return (*member(Value::of(to_str(v)), name, a.pos).callable)(none);
  }
  if (name == "default" || name == "d") {
    const bool boolean = truthy(a.get(1, "boolean", Value::of(false)));
    const bool use_default = v.is(K::kUndefined) || (boolean && !truthy(v));
    return use_default ? a.get(0, "default_value", Value::of(std::string())) : v;
  }
  if (name == "items") {
    if (v.is(K::kUndefined)) return Value::of(List{});
    if (!v.is(K::kDict)) render_error(a.pos, fmt::format("items of a {}", kind_name(v.kind)));
    List out;
    for (const auto& [k, item] : *v.dict) out.push_back(Value::of(List{Value::of(k), item}));
    return Value::of(std::move(out));
  }
  if (name == "string" || name == "safe") return v.is(K::kString) ? v : Value::of(to_str(v));
  if (name == "int") return to_number(v, true, a.get(0, "default", Value::of(int64_t{0})));
  if (name == "float") return to_number(v, false, a.get(0, "default", Value::of(0.0)));
  if (name == "list") return Value::of(iterate(v, a.pos));
  if (name == "join") {
    const Value sep = a.get(0, "d", Value::of(std::string()));
    const Value attr = a.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v, a.pos)) {
      if (!first) out += to_str(sep);
      first = false;
      out += to_str(attr.is(K::kString) ? member(item, attr.str, a.pos) : item);
    }
    return Value::of(std::move(out));
  }
  if (name == "first" || name == "last") {
    const List items = iterate(v, a.pos);
    if (items.empty()) return Value{};
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    List items = iterate(v, a.pos);
    std::reverse(items.begin(), items.end());
    if (!v.is(K::kString)) return Value::of(std::move(items));
    std::string out;
    for (const Value& c : items) out += c.str;
    return Value::of(std::move(out));
  }
  if (name == "replace") {
    Args replace_args = a;
    return (*member(Value::of(to_str(v)), "replace", a.pos).callable)(replace_args);
  }
  if (name == "abs") {
    if (v.is(K::kInt)) return Value::of(v.integer < 0 ? -v.integer : v.integer);
    if (v.is(K::kFloat)) return Value::of(std::fabs(v.real));
    render_error(a.pos, fmt::format("abs of a {}", kind_name(v.kind)));
  }
  if (name == "select" || name == "reject") return select(v, a, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return select(v, a, true, name == "selectattr");
  if (name == "map") {
    const Value attr = a.keyword_or("attribute");
    List out;
    for (const Value& item : iterate(v, a.pos)) {
      if (attr.is(K::kString)) {
        const Value got = item.is(K::kDict) ? member(item, attr.str, a.pos) : Value{};
        out.push_back(got.is(K::kUndefined) ? a.keyword_or("default") : got);
      } else {
        if (a.positional.empty() || !a.positional[0].is(K::kString)) {
          render_error(a.pos, "map() takes a filter name or attribute=");
        }
        Args rest;
        rest.pos = a.pos;
        rest.positional.assign(a.positional.begin() + 1, a.positional.end());
        out.push_back(apply_filter(a.positional[0].str, item, rest));
      }
    }
    return Value::of(std::move(out));
  }
  throw TemplateError(
      TemplateError::Kind::kUnsupported, a.pos,
      fmt::format("the filter '{}' is not supported (supported: {})", name, kFilters));
}

bool apply_test(const std::string& name, const Value& v, Args& a) {
  if (name == "defined") return !v.is(K::kUndefined);
  if (name == "undefined") return v.is(K::kUndefined);
  if (name == "none") return v.is(K::kNone);
  if (name == "string") return v.is(K::kString);
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is(K::kInt);
  if (name == "float") return v.is(K::kFloat);
  if (name == "boolean") return v.is(K::kBool);
  if (name == "true") return v.is(K::kBool) && v.boolean;
  if (name == "false") return v.is(K::kBool) && !v.boolean;
  if (name == "mapping") return v.is(K::kDict);
  if (name == "iterable") return v.is(K::kList) || v.is(K::kDict) || v.is(K::kString);
  if (name == "sequence") return v.is(K::kList) || v.is(K::kDict) || v.is(K::kString);
  if (name == "callable") return v.is(K::kCallable);
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is(K::kInt))
      render_error(a.pos, fmt::format("'{}' tests an integer, not a {}", name, kind_name(v.kind)));
    if (name == "divisibleby") {
      const Value d = a.get(0, "num");
      if (!d.is(K::kInt) || d.integer == 0)
        render_error(a.pos, "divisibleby takes a non-zero integer");
      return v.integer % d.integer == 0;
    }
    return (v.integer % 2 != 0) == (name == "odd");
  }
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas")
    return equal(v, a.get(0, "other"));
  if (name == "ne" || name == "!=") return !equal(v, a.get(0, "other"));
  if (name == "lt" || name == "le" || name == "gt" || name == "ge") {
    const int c = compare(v, a.get(0, "other"), a.pos);
    return name == "lt" ? c < 0 : name == "le" ? c <= 0 : name == "gt" ? c > 0 : c >= 0;
  }
  if (name == "in") {
    const Value container = a.get(0, "seq");
    for (const Value& item : iterate(container, a.pos)) {
      if (equal(item, v)) return true;
    }
    return container.is(K::kString) && v.is(K::kString) &&
           container.str.find(v.str) != std::string::npos;
  }
  if (name == "lower" || name == "upper") {
    if (!v.is(K::kString)) return false;
    Args none;
    none.pos = a.pos;
    return (*member(v, name, a.pos).callable)(none).str == v.str;
  }
  throw TemplateError(TemplateError::Kind::kUnsupported, a.pos,
                      fmt::format("the test '{}' is not supported (supported: {})", name, kTests));
}

}  // namespace ib::detail::jinja
