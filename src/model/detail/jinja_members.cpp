// Member access, subscripts, slices, iteration and global functions of the Jinja subset, with
// the Python string and dict methods chat templates call.
#include <algorithm>
#include <array>
#include <ctime>

#include <fmt/format.h>

#include "model/detail/jinja_builtins.h"

namespace ib::detail::jinja {
namespace {

using K = Value::Kind;

constexpr std::string_view kWhitespace = " \t\n\r\f\v";

std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::string set = chars.is(K::kString) ? chars.str : std::string(kWhitespace);
  size_t b = 0;
  size_t e = s.size();
  if (left) {
    while (b < e && set.find(s[b]) != std::string::npos) ++b;
  }
  if (right) {
    while (e > b && set.find(s[e - 1]) != std::string::npos) --e;
  }
  return s.substr(b, e - b);
}

Value split(const std::string& s, const Value& sep, const Value& maxsplit) {
  int64_t left = maxsplit.is(K::kInt) ? maxsplit.integer : -1;
  List parts;
  if (!sep.is(K::kString)) {  // runs of whitespace, no empty parts
    size_t i = 0;
    while (true) {
      while (i < s.size() && kWhitespace.find(s[i]) != std::string_view::npos) ++i;
      if (i >= s.size()) break;
      if (left == 0) {
        parts.push_back(Value::of(strip(s.substr(i), Value{}, false, true)));
        break;
      }
      size_t j = i;
      while (j < s.size() && kWhitespace.find(s[j]) == std::string_view::npos) ++j;
      parts.push_back(Value::of(s.substr(i, j - i)));
      --left;
      i = j;
    }
    return Value::of(std::move(parts));
  }
  if (sep.str.empty()) render_error({}, "split(): empty separator");
  size_t i = 0;
  while (true) {
    const size_t j = left == 0 ? std::string::npos : s.find(sep.str, i);
    if (j == std::string::npos) {
      parts.push_back(Value::of(s.substr(i)));
      break;
    }
    parts.push_back(Value::of(s.substr(i, j - i)));
    --left;
    i = j + sep.str.size();
  }
  return Value::of(std::move(parts));
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s) {
    if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t i = 0;
  for (size_t j = s.find(from); j != std::string::npos && count != 0; j = s.find(from, i)) {
    out += s.substr(i, j - i) + to;
    i = j + from.size();
    --count;
  }
  return out + s.substr(i);
}

Value string_method(const std::string& s, const std::string& name, Args& a) {
  if (name == "strip") return Value::of(strip(s, a.get(0, "chars"), true, true));
  if (name == "lstrip") return Value::of(strip(s, a.get(0, "chars"), true, false));
  if (name == "rstrip") return Value::of(strip(s, a.get(0, "chars"), false, true));
  if (name == "split") return split(s, a.get(0, "sep"), a.get(1, "maxsplit"));
  if (name == "upper" || name == "lower") return Value::of(ascii_case(s, name == "upper"));
  if (name == "startswith" || name == "endswith") {
    const Value p = a.get(0, "prefix");
    if (!p.is(K::kString)) render_error(a.pos, name + "() takes a string");
    const bool start = name == "startswith";
    return Value::of(s.size() >= p.str.size() &&
                     s.compare(start ? 0 : s.size() - p.str.size(), p.str.size(), p.str) == 0);
  }
  if (name == "replace") {
    const Value from = a.get(0, "old"), to = a.get(1, "new"), count = a.get(2, "count");
    if (!from.is(K::kString) || !to.is(K::kString)) render_error(a.pos, "replace() takes strings");
    return Value::of(replace_all(s, from.str, to.str, count.is(K::kInt) ? count.integer : -1));
  }
  if (name == "find") {
    const Value sub = a.get(0, "sub");
    if (!sub.is(K::kString)) render_error(a.pos, "find() takes a string");
    const size_t at = s.find(sub.str);
    return Value::of(at == std::string::npos
                         ? int64_t{-1}
                         : static_cast<int64_t>(characters(s.substr(0, at)).size()));
  }
  if (name == "title" || name == "capitalize") {
    std::string out = ascii_case(s, false);
    bool word_start = true;
    for (char& c : out) {
      const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
      if (alpha && word_start && c >= 'a') c = static_cast<char>(c - 'a' + 'A');
      if (name == "title") {
        word_start = !alpha;
      } else {
        word_start = false;
      }
    }
    return Value::of(std::move(out));
  }
  if (name == "join") {
    std::string out;
    const Value items = a.get(0, "iterable");
    bool first = true;
    for (const Value& v : iterate(items, a.pos)) {
      if (!first) out += s;
      first = false;
      out += to_str(v);
    }
    return Value::of(std::move(out));
  }
  throw TemplateError(TemplateError::Kind::kUnsupported, a.pos,
                      fmt::format("the string method '{}' is not supported (supported: strip, "
                                  "lstrip, rstrip, split, startswith, endswith, upper, lower, "
                                  "title, capitalize, replace, find, join)",
                                  name));
}

Value dict_method(const Value& d, const std::string& name, Args& a) {
  if (name == "items") return apply_filter("items", d, a);
  if (name == "keys" || name == "values") {
    List out;
    for (const auto& [k, v] : *d.dict) out.push_back(name == "keys" ? Value::of(k) : v);
    return Value::of(std::move(out));
  }
  if (name == "get") {
    const Value key = a.get(0, "key");
    const Value* v = key.is(K::kString) ? d.find(key.str) : nullptr;
    return v ? *v : a.get(1, "default", Value::none());
  }
  throw TemplateError(TemplateError::Kind::kUnsupported, a.pos,
                      fmt::format("the dict method '{}' is not supported (supported: items, "
                                  "keys, values, get)",
                                  name));
}

// Python's slice.indices(): the positions a slice visits.
std::vector<int64_t> slice_positions(int64_t n, std::optional<int64_t> start,
                                     std::optional<int64_t> stop, int64_t step) {
  const auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t i = *v < 0 ? *v + n : *v;
    const int64_t lo = step < 0 ? -1 : 0;
    const int64_t hi = step < 0 ? n - 1 : n;
    return std::clamp(i, lo, hi);
  };
  const int64_t b = clamp(start, step < 0 ? n - 1 : 0);
  const int64_t e = clamp(stop, step < 0 ? -1 : n);
  std::vector<int64_t> out;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) out.push_back(i);
  return out;
}

}  // namespace

void render_error(SourcePos pos, const std::string& message) {
  throw TemplateError(TemplateError::Kind::kRender, pos, message);
}

std::vector<std::string> characters(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t j = i + 1;
    while (j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

Value member(const Value& object, const std::string& name, SourcePos pos) {
  switch (object.kind) {
    case K::kUndefined:
      render_error(pos, fmt::format("cannot read attribute '{}' of an undefined value", name));
    case K::kNone:
      render_error(pos, fmt::format("cannot read attribute '{}' of None", name));
    case K::kDict:
      if (const Value* v = object.find(name)) return *v;
      if (object.is_namespace) return Value{};
      if (name == "items" || name == "keys" || name == "values" || name == "get") {
        return Value::function([object, name](Args& a) { return dict_method(object, name, a); });
      }
      return Value{};
    case K::kString:
      return Value::function([s = object.str, name](Args& a) { return string_method(s, name, a); });
    default:
      return Value{};
  }
}

Value subscript(const Value& object, const Value& key, SourcePos pos) {
  if (object.is(K::kDict)) {
    if (!key.is(K::kString)) return Value{};
    const Value* v = object.find(key.str);
    return v ? *v : Value{};
  }
  if (object.is(K::kList) || object.is(K::kString)) {
    if (!key.is(K::kInt)) {
      if (key.is(K::kString) && object.is(K::kString)) return member(object, key.str, pos);
      render_error(pos, fmt::format("a {} index must be an integer, not {}", kind_name(object.kind),
                                    kind_name(key.kind)));
    }
    if (object.is(K::kList)) {
      const int64_t n = static_cast<int64_t>(object.list->size());
      const int64_t i = key.integer < 0 ? key.integer + n : key.integer;
      return i >= 0 && i < n ? (*object.list)[static_cast<size_t>(i)] : Value{};
    }
    const auto chars = characters(object.str);
    const int64_t n = static_cast<int64_t>(chars.size());
    const int64_t i = key.integer < 0 ? key.integer + n : key.integer;
    return i >= 0 && i < n ? Value::of(chars[static_cast<size_t>(i)]) : Value{};
  }
  if (object.is(K::kUndefined)) render_error(pos, "cannot subscript an undefined value");
  render_error(pos, fmt::format("cannot subscript a {}", kind_name(object.kind)));
}

Value slice(const Value& object, std::optional<int64_t> start, std::optional<int64_t> stop,
            std::optional<int64_t> step, SourcePos pos) {
  const int64_t s = step.value_or(1);
  if (s == 0) render_error(pos, "slice step cannot be zero");
  if (object.is(K::kList)) {
    List out;
    for (int64_t i : slice_positions(static_cast<int64_t>(object.list->size()), start, stop, s)) {
      out.push_back((*object.list)[static_cast<size_t>(i)]);
    }
    return Value::of(std::move(out));
  }
  if (object.is(K::kString)) {
    const auto chars = characters(object.str);
    std::string out;
    for (int64_t i : slice_positions(static_cast<int64_t>(chars.size()), start, stop, s)) {
      out += chars[static_cast<size_t>(i)];
    }
    return Value::of(std::move(out));
  }
  render_error(pos, fmt::format("cannot slice a {}", kind_name(object.kind)));
}

List iterate(const Value& v, SourcePos pos) {
  switch (v.kind) {
    case K::kUndefined:
      return {};
    case K::kList:
      return *v.list;
    case K::kDict: {
      List keys;
      for (const auto& [k, item] : *v.dict) keys.push_back(Value::of(k));
      return keys;
    }
    case K::kString: {
      List out;
      for (std::string& c : characters(v.str)) out.push_back(Value::of(std::move(c)));
      return out;
    }
    default:
      render_error(pos, fmt::format("a {} is not iterable", kind_name(v.kind)));
  }
}

void add_globals(Dict& globals) {
  globals.emplace_back("raise_exception", Value::function([](Args& a) -> Value {
                         throw TemplateError(TemplateError::Kind::kRaised, a.pos,
                                             to_str(a.get(0, "message")));
                       }));
  globals.emplace_back("namespace", Value::function([](Args& a) {
                         Value ns = Value::of(Dict{});
                         ns.is_namespace = true;
                         if (!a.positional.empty() && a.positional[0].is(K::kDict))
                           *ns.dict = *a.positional[0].dict;
                         for (const auto& kv : a.keyword) ns.dict->push_back(kv);
                         return ns;
                       }));
  globals.emplace_back("dict", Value::function([](Args& a) {
                         Dict d(a.keyword.begin(), a.keyword.end());
                         return Value::of(std::move(d));
                       }));
  globals.emplace_back("range", Value::function([](Args& a) {
                         for (const Value& v : a.positional) {
                           if (!v.is(K::kInt)) render_error(a.pos, "range() takes integers");
                         }
                         if (a.positional.empty() || a.positional.size() > 3)
                           render_error(a.pos, "range() takes 1 to 3 integers");
                         const bool one = a.positional.size() == 1;
                         const int64_t b = one ? 0 : a.positional[0].integer;
                         const int64_t e = one ? a.positional[0].integer : a.positional[1].integer;
                         const int64_t step =
                             a.positional.size() == 3 ? a.positional[2].integer : 1;
                         if (step == 0) render_error(a.pos, "range() step cannot be zero");
                         List out;
                         for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
                           if (out.size() >= (1u << 20))
                             render_error(a.pos, "range() over 2^20 items");
                           out.push_back(Value::of(i));
                         }
                         return Value::of(std::move(out));
                       }));
  // transformers' strftime_now(format): the local time now (Llama-3.2's templates date their
  // system prompt with it).
  globals.emplace_back("strftime_now", Value::function([](Args& a) {
                         const Value format = a.get(0, "format");
                         if (!format.is(K::kString))
                           render_error(a.pos, "strftime_now() takes a format string");
                         const std::time_t now = std::time(nullptr);
                         std::tm local{};
                         localtime_r(&now, &local);
                         char buf[256];
                         const size_t n =
                             std::strftime(buf, sizeof(buf), format.str.c_str(), &local);
                         return Value::of(std::string(buf, n));
                       }));
  for (const char* name : {"cycler", "joiner", "lipsum"}) {
    globals.emplace_back(name, Value::function([name](Args& a) -> Value {
                           throw TemplateError(
                               TemplateError::Kind::kUnsupported, a.pos,
                               fmt::format("the global function '{}' is not supported (supported: "
                                           "raise_exception, namespace, range, dict, "
                                           "strftime_now)",
                                           name));
                         }));
  }
}

}  // namespace ib::detail::jinja
