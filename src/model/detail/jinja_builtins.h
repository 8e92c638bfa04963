// The built-ins of the Jinja subset (detail of chat_template.h): filters, tests, member access
// (dict keys, string/dict methods), subscripts and slices, and the global functions. Each throws
// TemplateError at args.pos / pos: kUnsupported for a name outside the subset, kRender for a
// value of the wrong type, kRaised from raise_exception().
#pragma once

#include <optional>
#include <string>

#include "model/detail/jinja_value.h"

namespace ib::detail::jinja {

// operand | name(args)
Value apply_filter(const std::string& name, const Value& operand, Args& args);
// operand is name(args)
bool apply_test(const std::string& name, const Value& operand, Args& args);
// object.name: a dict's key, else a bound method (str.strip, dict.items, ...), else undefined.
Value member(const Value& object, const std::string& name, SourcePos pos);
// object[key]: dict key, list or string index (negative from the end); undefined when absent.
Value subscript(const Value& object, const Value& key, SourcePos pos);
// object[start:stop:step] of a list or string, Python's rules.
Value slice(const Value& object, std::optional<int64_t> start, std::optional<int64_t> stop,
            std::optional<int64_t> step, SourcePos pos);
// The values a for loop visits: list items, dict keys, string characters; undefined: none.
List iterate(const Value& v, SourcePos pos);
// raise_exception, namespace, range, dict; and Jinja globals outside the subset, which refuse.
void add_globals(Dict& globals);
// UTF-8 characters of s (Python's str indexing).
std::vector<std::string> characters(const std::string& s);
[[noreturn]] void render_error(SourcePos pos, const std::string& message);

}  // namespace ib::detail::jinja
