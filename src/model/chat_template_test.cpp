#include "model/chat_template.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/gguf_file.h"

namespace ib {
namespace {

using nlohmann::ordered_json;

// Renders source with variables; a failure's message instead of the text.
std::string render(const std::string& source,
                   const ordered_json& variables = ordered_json::object()) {
  auto t = ChatTemplate::parse(source);
  if (!t.ok()) return "PARSE ERROR: " + t.error().message;
  auto out = t->render(variables);
  return out.ok() ? *out : "RENDER ERROR: " + out.error().message;
}

TEST(ChatTemplate, TextAndOutput) {
  EXPECT_EQ(render("Hello {{ name }}!", {{"name", "world"}}), "Hello world!");
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}"),
            "7 3 2 3.5 1024");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ true }}"), "a1NoneTrue");
  EXPECT_EQ(render("{{ [1, 'x', none] }} {{ {'k': 'v'} }}"), "[1, 'x', None] {'k': 'v'}");
  EXPECT_EQ(render("{{ undefined_name }}|"), "|");
  EXPECT_EQ(render("{{ 'a' 'b' }}{{ \"\\n\" }}"), "ab\n");
}

TEST(ChatTemplate, WhitespaceControlAndBlockOptions) {
  EXPECT_EQ(render("a  {{- 'b' -}}  \n c"), "abc");
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indent before one.
  EXPECT_EQ(render("{% if true %}\n  x\n  {% endif %}\ny"), "  x\ny");
  EXPECT_EQ(render("{# comment #}\nz"), "z");
  EXPECT_EQ(render("a\n"), "a");  // one trailing newline dropped
  EXPECT_EQ(render("{%- if true -%}  x  {%- endif -%}  "), "x");
}

TEST(ChatTemplate, IfElifElse) {
  const std::string t = "{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %}";
  EXPECT_EQ(render(t, {{"n", 1}}), "one");
  EXPECT_EQ(render(t, {{"n", 2}}), "two");
  EXPECT_EQ(render(t, {{"n", 3}}), "many");
  EXPECT_EQ(render("{{ 'y' if x is defined else 'n' }}{{ 'z' if not x }}"), "nz");
}

TEST(ChatTemplate, ForLoopVariablesAndScopes) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index0 }}{{ loop.index }}{{ x }}"
                   "{% if loop.first %}F{% endif %}{% if loop.last %}L{{ loop.length }}{% endif %},"
                   "{% endfor %}",
                   {{"xs", {"a", "b", "c"}}}),
            "01aF,12b,23cL3,");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in [1,2,3,4] if x is even %}{{ x }}{% endfor %}"), "24");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
                   {{"d", {{"b", 1}, {"a", 2}}}}),
            "b=1;a=2;");
  EXPECT_EQ(render("{% for x in range(5) %}{% if x == 1 %}{% continue %}{% endif %}"
                   "{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "02");
  // A set inside a loop stays in it; a namespace carries values out.
  EXPECT_EQ(render("{% set x = 1 %}{% set ns = namespace(y=1) %}{% for i in [2] %}"
                   "{% set x = i %}{% set ns.y = i %}{% endfor %}{{ x }}{{ ns.y }}"),
            "12");
}

TEST(ChatTemplate, SetForms) {
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set x %}in{{ 1 }}{% endset %}[{{ x }}]"), "[in1]");
  EXPECT_EQ(render("{% set ns = namespace(a='') %}{% set ns.a = ns.a + 'q' %}{{ ns.a }}"), "q");
}

TEST(ChatTemplate, SubscriptsSlicesAndStrings) {
  const ordered_json v = {{"m", {"a", "b", "c", "d"}}, {"s", "héllo"}};
  EXPECT_EQ(render("{{ m[1:] }}{{ m[::-1] }}{{ m[-1] }}{{ m[:2] }}{{ m[9] is defined }}", v),
            "['b', 'c', 'd']['d', 'c', 'b', 'a']d['a', 'b']False");
  EXPECT_EQ(render("{{ s[1] }}{{ s[::-1] }}{{ s|length }}", v), "éolléh5");
  EXPECT_EQ(
      render(
          "{{ '  x  '.strip() }}|{{ '\\nx\\n'.lstrip('\\n') }}|{{ 'a b  c'.split() }}|"
          "{{ 'a</t>b'.split('</t>')[-1] }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('x') }}"),
      "x|x\n|['a', 'b', 'c']|b|TrueFalse");
  EXPECT_EQ(
      render("{{ 'Ab'.upper() }}{{ 'Ab'|lower }}{{ 'a-b'.replace('-', '+') }}{{ 'x' in 'xyz' }}"),
      "ABab"
      "a+bTrue");
}

TEST(ChatTemplate, FiltersAndTests) {
  EXPECT_EQ(
      render("{{ '  t '|trim }}{{ [1,2]|length }}{{ x|default('d') }}{{ ''|default('e', true) }}"),
      "t2de");
  EXPECT_EQ(render("{{ {'a': [1, 'é', none, true, 1.5]}|tojson }}"),
            "{\"a\": [1, \"é\", null, true, 1.5]}");
  EXPECT_EQ(render("{{ {'a': 1}|tojson(indent=2) }}"), "{\n  \"a\": 1\n}");
  EXPECT_EQ(render("{{ s|tojson }}", {{"s", "q\"b\\\n\x01\xff"}}),
            "\"q\\\"b\\\\\\n\\u0001\xEF\xBF\xBD\"");
  EXPECT_EQ(render("{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='c')|join(',') }}",
                   {{"ms",
                     {{{"role", "user"}, {"c", "1"}},
                      {{"role", "x"}, {"c", "2"}},
                      {{"role", "user"}, {"c", "3"}}}}}),
            "1,3");
  EXPECT_EQ(render("{{ none is none }}{{ 's' is string }}{{ 1 is number }}{{ {} is mapping }}"
                   "{{ x is not defined }}{{ [] is iterable }}{{ 3 is odd }}"),
            "TrueTrueTrueTrueTrueTrueTrue");
}

TEST(ChatTemplate, GenerationTagsAndStrftime) {
  EXPECT_EQ(render("a{% generation %}b{% endgeneration %}c"), "abc");
  EXPECT_EQ(render("{{ strftime_now('%Y')|length }}"), "4");
}

TEST(ChatTemplate, Macros) {
  EXPECT_EQ(
      render("{% macro m(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}"),
      "<1B><12>");
}

TEST(ChatTemplate, RaiseExceptionCarriesTheMessage) {
  EXPECT_EQ(render("ok{% if x %}{{ raise_exception('System role not supported') }}{% endif %}",
                   {{"x", true}}),
            "RENDER ERROR: the chat template rejected the messages: System role not supported "
            "(raise_exception at line 1, column 31)");
}

TEST(ChatTemplate, MalformedTemplatesNameLineAndColumn) {
  EXPECT_EQ(render("{% if x %}\nno end"),
            "PARSE ERROR: malformed chat template at line 2, column 7: unexpected end of template: "
            "missing '{% endif %}'");
  EXPECT_EQ(render("a\n  {{ x + }}"),
            "PARSE ERROR: malformed chat template at line 2, column 10: expected an expression, "
            "got '}}'");
  EXPECT_EQ(
      render("{{ 'open }}"),
      "PARSE ERROR: malformed chat template at line 1, column 4: unterminated string literal");
  EXPECT_EQ(
      render("{% endfor %}"),
      "PARSE ERROR: malformed chat template at line 1, column 4: unexpected '{% endfor %}' with no "
      "open block it could close");
  EXPECT_EQ(
      render("{{ x"),
      "PARSE ERROR: malformed chat template at line 1, column 1: unclosed '{{' (no matching '}}')");
}

TEST(ChatTemplate, UnsupportedFeaturesAreNamed) {
  EXPECT_EQ(
      render("x\n{% include 'other.jinja' %}"),
      "PARSE ERROR: chat template line 2, column 1: unsupported Jinja feature: the '{% include %}' "
      "statement is not supported (supported: if, for, set, macro, break, continue)");
  const std::string filter = render("{{ x|wordwrap }}");
  EXPECT_NE(
      filter.find(
          "line 1, column 6: unsupported Jinja feature: the filter 'wordwrap' is not supported"),
      std::string::npos)
      << filter;
  const std::string test = render("{{ x is escaped }}");
  EXPECT_NE(test.find("unsupported Jinja feature: the test 'escaped'"), std::string::npos) << test;
  const std::string global = render("{{ cycler(1, 2) }}");
  EXPECT_NE(global.find("the global function 'cycler' is not supported"), std::string::npos)
      << global;
}

TEST(ChatTemplate, TypeErrorsAreRenderErrors) {
  EXPECT_EQ(render("{{ 'a' + 1 }}"),
            "RENDER ERROR: chat template line 1, column 8: unsupported operand types for +: string "
            "and integer");
  EXPECT_EQ(render("{{ x.y }}"),
            "RENDER ERROR: chat template line 1, column 5: cannot read attribute 'y' of an "
            "undefined value");
  EXPECT_EQ(
      render("{% set x = 1 %}{% set x.y = 2 %}"),
      "RENDER ERROR: chat template line 1, column 16: cannot set 'x.y': 'x' is not a namespace()");
}

TEST(ChatFormat, RendersMessagesWithSpecialTokens) {
  auto t = ChatTemplate::parse(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m['content'] }}{% endfor %}"
      "{% if add_generation_prompt %}[assistant]{% endif %}");
  ASSERT_TRUE(t.ok()) << t.error().message;
  const ChatFormat f = ChatFormat::from(std::move(t).value(), "test", {{"bos_token", "<s>"}});
  const ordered_json messages = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(*f.render(messages, true), "<s>[user]hi[assistant]");
  EXPECT_EQ(*f.render(messages, false), "<s>[user]hi");
}

TEST(ChatFormat, NoTemplateIsNotAnError) {
  auto f = ChatFormat::load("", "");
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->has_value());
  auto missing = ChatFormat::load("", "/nonexistent/template.jinja");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("cannot read chat template file"), std::string::npos);
}

// Writes a GGUF file (no tensors) with metadata to a fresh temporary path.
std::string write_gguf(const std::string& name, const std::vector<GgufMetadata>& metadata) {
  const std::string path =
      (std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()) + ".gguf"))
          .string();
  std::ofstream(path, std::ios::binary) << serialize_gguf(metadata, {}).value();
  return path;
}

TEST(ChatFormat, GgufFileTemplateWithItsBosAndEosTokens) {
  using V = GgufValueType;
  const std::string path = write_gguf(
      "chat_template_gguf",
      {{"general.architecture", GgufValue::of_string("llama")},
       {"tokenizer.ggml.tokens", GgufValue::of_strings({"<unk>", "<s>", "</s>", "a"})},
       {"tokenizer.ggml.bos_token_id", GgufValue::of_uint(V::kU32, 1)},
       {"tokenizer.ggml.eos_token_id", GgufValue::of_uint(V::kU32, 2)},
       {"tokenizer.chat_template",
        GgufValue::of_string("{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                             "{{ eos_token }}{% endfor %}")}});
  auto f = ChatFormat::load(path, "");
  ASSERT_TRUE(f.ok()) << f.error().message;
  ASSERT_TRUE(f->has_value());
  EXPECT_NE((*f)->origin().find("tokenizer.chat_template"), std::string::npos);
  const ordered_json messages = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(*(*f)->render(messages, true), "<s><user>hi</s>");

  // --chat-template FILE replaces the file's template; the file's tokens stay variables.
  const std::string jinja = path + ".jinja";
  std::ofstream(jinja) << "[{{ eos_token }}]";
  auto overridden = ChatFormat::load(path, jinja);
  ASSERT_TRUE(overridden.ok()) << overridden.error().message;
  EXPECT_EQ(*(*overridden)->render(messages, true), "[</s>]");
  std::filesystem::remove(jinja);
  std::filesystem::remove(path);
}

TEST(ChatFormat, GgufFileWithoutTemplateOrWithABadOne) {
  const std::string none =
      write_gguf("chat_template_none", {{"general.architecture", GgufValue::of_string("llama")}});
  auto f = ChatFormat::load(none, "");
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_FALSE(f->has_value());
  const std::string bad = write_gguf(
      "chat_template_bad", {{"tokenizer.chat_template", GgufValue::of_string("{% if x %}")}});
  auto broken = ChatFormat::load(bad, "");
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.error().message.find("tokenizer.chat_template"), std::string::npos)
      << broken.error().message;
  const std::string typed =
      write_gguf("chat_template_typed",
                 {{"tokenizer.chat_template", GgufValue::of_uint(GgufValueType::kU32, 7)}});
  auto mistyped = ChatFormat::load(typed, "");
  ASSERT_FALSE(mistyped.ok());
  EXPECT_NE(mistyped.error().message.find("not a string"), std::string::npos)
      << mistyped.error().message;
  for (const auto& p : {none, bad, typed}) std::filesystem::remove(p);
}

}  // namespace
}  // namespace ib
