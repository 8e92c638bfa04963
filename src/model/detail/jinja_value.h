// Values of the Jinja subset (detail of chat_template.h): Python's types as Jinja sees them.
// Lists, dicts and namespaces are shared by reference, as in Python, so `ns.x = ...` and
// `list.append` are visible to every holder.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ib::detail::jinja {

// Where in the template source a node starts (1-based).
struct SourcePos {
  int line = 1;
  int column = 1;
};

// The one exception of the renderer; it never leaves chat_template.cpp.
struct TemplateError : std::runtime_error {
  enum class Kind { kSyntax, kUnsupported, kRaised, kRender };
  TemplateError(Kind k, SourcePos p, const std::string& message)
      : std::runtime_error(message), kind(k), pos(p) {}
  Kind kind;
  SourcePos pos;
};

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion-ordered, as Python's
struct Args;
using Callable = std::function<Value(Args&)>;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };
  Kind kind = Kind::kUndefined;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string str;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;  // a namespace() is a dict with is_namespace
  bool is_namespace = false;
  std::shared_ptr<Callable> callable;

  static Value none() { return of(Kind::kNone); }
  static Value of(bool b) {
    Value v = of(Kind::kBool);
    v.boolean = b;
    return v;
  }
  static Value of(int64_t i) {
    Value v = of(Kind::kInt);
    v.integer = i;
    return v;
  }
  static Value of(double d) {
    Value v = of(Kind::kFloat);
    v.real = d;
    return v;
  }
  static Value of(std::string s) {
    Value v = of(Kind::kString);
    v.str = std::move(s);
    return v;
  }
  static Value of(List l) {
    Value v = of(Kind::kList);
    v.list = std::make_shared<List>(std::move(l));
    return v;
  }
  static Value of(Dict d) {
    Value v = of(Kind::kDict);
    v.dict = std::make_shared<Dict>(std::move(d));
    return v;
  }
  static Value function(Callable f) {
    Value v = of(Kind::kCallable);
    v.callable = std::make_shared<Callable>(std::move(f));
    return v;
  }
  static Value of(Kind k) {
    Value v;
    v.kind = k;
    return v;
  }

  bool is(Kind k) const { return kind == k; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  double as_double() const { return kind == Kind::kInt ? static_cast<double>(integer) : real; }
  // The value under key, or nullptr.
  const Value* find(const std::string& key) const;
};

// Call arguments: positional, then keyword, in call order.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  SourcePos pos;
  // The i-th positional or the keyword `name`, else fallback.
  Value get(size_t i, const std::string& name, Value fallback = Value{}) const;
  // The keyword argument `name` only, else fallback.
  Value keyword_or(const std::string& name, Value fallback = Value{}) const;
};

const char* kind_name(Value::Kind k);
bool truthy(const Value& v);
// str(v) as Jinja prints it ({{ v }}): None -> "None", undefined -> "", lists in Python repr.
std::string to_str(const Value& v);
// Python repr (strings quoted), used inside printed lists and dicts.
std::string repr(const Value& v);
// Python equality: 1 == 1.0, lists and dicts element-wise.
bool equal(const Value& a, const Value& b);
// json.dumps as transformers' tojson calls it (separators ", " and ": ", non-ASCII kept).
std::string to_json(const Value& v, int indent, int depth = 0);
Value from_json(const nlohmann::ordered_json& j);

}  // namespace ib::detail::jinja
