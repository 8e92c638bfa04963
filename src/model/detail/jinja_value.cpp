// Values of the Jinja subset: truthiness, printing (str and repr as Python), equality, JSON.
#include "model/detail/jinja_value.h"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ib::detail::jinja {
namespace {

using K = Value::Kind;

// repr(float) as Python prints it: shortest round trip, always with a '.' or an exponent.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string quote_python(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  out += q;
  return out;
}

// A JSON string literal as Python's json.dumps(ensure_ascii=False) writes it (invalid UTF-8,
// which a Python str cannot hold, becomes U+FFFD).
void append_json_string(std::string& out, const std::string& s) {
  out += nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

const Value* Value::find(const std::string& key) const {
  if (!dict) return nullptr;
  for (const auto& [k, v] : *dict) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value Args::get(size_t i, const std::string& name, Value fallback) const {
  if (i < positional.size()) return positional[i];
  for (const auto& [k, v] : keyword) {
    if (k == name) return v;
  }
  return fallback;
}

Value Args::keyword_or(const std::string& name, Value fallback) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return v;
  }
  return fallback;
}

const char* kind_name(K k) {
  switch (k) {
    case K::kUndefined:
      return "undefined";
    case K::kNone:
      return "none";
    case K::kBool:
      return "boolean";
    case K::kInt:
      return "integer";
    case K::kFloat:
      return "float";
    case K::kString:
      return "string";
    case K::kList:
      return "list";
    case K::kDict:
      return "dict";
    case K::kCallable:
      return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case K::kUndefined:
    case K::kNone:
      return false;
    case K::kBool:
      return v.boolean;
    case K::kInt:
      return v.integer != 0;
    case K::kFloat:
      return v.real != 0;
    case K::kString:
      return !v.str.empty();
    case K::kList:
      return !v.list->empty();
    case K::kDict:
      return v.is_namespace || !v.dict->empty();
    case K::kCallable:
      return true;
  }
  return false;
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case K::kUndefined:
      return "";
    case K::kString:
      return v.str;
    default:
      return repr(v);
  }
}

namespace {

// A namespace may hold itself (`set ns.x = ns`): printing and comparing stop at this depth.
constexpr int kMaxValueDepth = 100;

void check_depth(int depth) {
  if (depth > kMaxValueDepth) {
    throw TemplateError(TemplateError::Kind::kRender, {}, "a value nested over 100 levels deep");
  }
}

std::string repr_at(const Value& v, int depth);
bool equal_at(const Value& a, const Value& b, int depth);

}  // namespace

std::string repr(const Value& v) {
  return repr_at(v, 0);
}

namespace {

std::string repr_at(const Value& v, int depth) {
  check_depth(depth);
  switch (v.kind) {
    case K::kUndefined:
      return "";
    case K::kNone:
      return "None";
    case K::kBool:
      return v.boolean ? "True" : "False";
    case K::kInt:
      return std::to_string(v.integer);
    case K::kFloat:
      return float_repr(v.real);
    case K::kString:
      return quote_python(v.str);
    case K::kList: {
      std::string out = "[";
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i > 0) out += ", ";
        out += repr_at((*v.list)[i], depth + 1);
      }
      out += ']';
      return out;
    }
    case K::kDict: {
      std::string out = v.is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, item] : *v.dict) {
        if (!first) out += ", ";
        first = false;
        out += quote_python(k) + ": " + repr_at(item, depth + 1);
      }
      out += v.is_namespace ? "}>" : "}";
      return out;
    }
    case K::kCallable:
      return "<function>";
  }
  return "";
}

bool equal_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is(K::kInt) && b.is(K::kInt)) return a.integer == b.integer;
    return a.as_double() == b.as_double();
  }
  // Python: True == 1; kept apart here, as no template compares them.
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kBool:
      return a.boolean == b.boolean;
    case K::kString:
      return a.str == b.str;
    case K::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i) {
        if (!equal_at((*a.list)[i], (*b.list)[i], depth + 1)) return false;
      }
      return true;
    case K::kDict:
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, item] : *a.dict) {
        const Value* other = b.find(k);
        if (!other || !equal_at(item, *other, depth + 1)) return false;
      }
      return true;
    default:
      return a.callable == b.callable;
  }
}

}  // namespace

bool equal(const Value& a, const Value& b) {
  return equal_at(a, b, 0);
}

std::string to_json(const Value& v, int indent, int depth) {
  check_depth(depth);
  const std::string item_sep = indent > 0 ? "," : ", ";
  std::string pad;
  std::string child_pad;
  if (indent > 0) {
    pad.push_back('\n');
    pad.append(static_cast<size_t>(indent * depth), ' ');
    child_pad = pad;
    child_pad.append(static_cast<size_t>(indent), ' ');
  }
  switch (v.kind) {
    case K::kUndefined:
    case K::kNone:
      return "null";
    case K::kBool:
      return v.boolean ? "true" : "false";
    case K::kInt:
      return std::to_string(v.integer);
    case K::kFloat:
      return std::isfinite(v.real) ? float_repr(v.real)
                                   : (std::isnan(v.real) ? "NaN"
                                      : v.real > 0       ? "Infinity"
                                                         : "-Infinity");
    case K::kString: {
      std::string out;
      append_json_string(out, v.str);
      return out;
    }
    case K::kList: {
      if (v.list->empty()) return "[]";
      std::string out = "[";
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i > 0) out += item_sep;
        out += child_pad + to_json((*v.list)[i], indent, depth + 1);
      }
      out += pad;
      out += ']';
      return out;
    }
    case K::kDict: {
      if (v.dict->empty()) return "{}";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, item] : *v.dict) {
        if (!first) out += item_sep;
        first = false;
        out += child_pad;
        append_json_string(out, k);
        out += ": " + to_json(item, indent, depth + 1);
      }
      out += pad;
      out += '}';
      return out;
    }
    case K::kCallable:
      return "null";
  }
  return "null";
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::of(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value::of(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Value::of(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::of(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& item : j) l.push_back(from_json(item));
      return Value::of(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.reserve(j.size());
      for (const auto& [k, item] : j.items()) d.emplace_back(k, from_json(item));
      return Value::of(std::move(d));
    }
    default:
      return Value::none();
  }
}

}  // namespace ib::detail::jinja
