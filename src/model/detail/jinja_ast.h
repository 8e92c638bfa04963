// The parsed form of a template (detail of chat_template.h): expressions and statements as
// trees owned by unique_ptr, each node with its source position for error messages.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/detail/jinja_value.h"

namespace ib::detail::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,      // value
    kName,         // name
    kList,         // items
    kTuple,        // items
    kDict,         // items as key, value pairs
    kAttribute,    // items[0].name
    kSubscript,    // items[0][items[1]]
    kSlice,        // items[0][items[1]:items[2]:items[3]] (null items absent)
    kCall,         // items[0](items[1..]), keyword argument names in names
    kFilter,       // items[0] | name(items[1..]) with keyword names
    kTest,         // items[0] is [not: negated] name(items[1..])
    kUnary,        // op items[0]: "not", "-", "+"
    kBinary,       // items[0] op items[1]
    kConditional,  // items[0] if items[1] else items[2] (items[2] may be null)
  };
  Kind kind;
  SourcePos pos;
  Value value;
  std::string name;  // name, attribute, filter, test or operator
  bool negated = false;
  std::vector<ExprPtr> items;
  std::vector<std::string> keywords;  // kCall/kFilter/kTest: names of trailing keyword arguments
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,    // text
    kOutput,  // {{ expr }}
    kIf,      // if expr: body, else orelse (elif nests an kIf in orelse)
    kFor,     // for targets in expr [if filter]: body, else orelse
    kSet,     // set targets = expr, or set target.attr = expr, or {% set x %}body{% endset %}
    kMacro,   // macro name(params = defaults): body
    kBreak,
    kContinue,
  };
  Kind kind;
  SourcePos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;                    // kFor: the inline `if`
  std::vector<std::string> targets;  // kFor/kSet names; kMacro parameter names
  std::string attribute;             // kSet on a namespace: targets[0].attribute
  std::vector<ExprPtr> defaults;     // kMacro: one per parameter, null when none
  Body body;
  Body orelse;
};

struct Program {
  Body body;
};

// Parses template source with transformers' environment options (trim_blocks, lstrip_blocks,
// one trailing newline dropped). Throws TemplateError (kSyntax, kUnsupported).
Program parse(std::string_view source);

// Renders with the given global variables. Throws TemplateError (kRender, kRaised, kUnsupported).
std::string render(const Program& program, const Dict& globals);

// Lexer output: text between tags, and the tokens inside tags.
struct Token {
  enum class Kind {
    kText,
    kExprOpen,
    kExprClose,
    kStmtOpen,
    kStmtClose,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEnd,
  };
  Kind kind;
  std::string text;  // text, name, string contents, number spelling or operator
  SourcePos pos;
};
std::vector<Token> lex(std::string_view source);

}  // namespace ib::detail::jinja
