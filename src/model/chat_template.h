// Front door of the chat templates: the Jinja subset that models' tokenizer_config.json
// `chat_template`s use (Llama-2/3, Mistral, Qwen2/3, Phi-3, Gemma-2/3, DeepSeek-V3), rendered as
// transformers' apply_chat_template does (trim_blocks, lstrip_blocks, its tojson). Checked
// against @huggingface/jinja by chat_template_npm_test. The implementation is private in
// detail/jinja_*.cpp; no exception leaves this interface.
//
// Supported: {% if/elif/else %}, {% for a[, b] in x [if c] %} with loop.* and {% else %},
// {% set %} (names, tuples, ns.attr of a namespace(), {% set x %}...{% endset %}), {% macro %},
// {% break/continue %}, comments, whitespace control; literals, lists, dicts, attributes,
// subscripts, slices, ~, arithmetic, comparisons, and/or/not, in, `if else`; the filters, tests
// and methods listed in detail/jinja_filters.cpp and detail/jinja_members.cpp; raise_exception,
// namespace, range, dict, strftime_now; {% generation %} tags are transparent. Anything else is
// an error that names it and its line and column.
//
// A ChatTemplate is immutable after parse(); render() may be called from any thread.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/result.h"

namespace ib {

namespace detail::jinja {
struct Program;
}

class ChatTemplate {
 public:
  // User errors: a malformed template ("chat template line 3, column 7: expected ...") or a
  // statement outside the subset.
  static Result<ChatTemplate> parse(const std::string& source);

  // Renders with the given global variables (an object: messages, add_generation_prompt,
  // bos_token, ...). User errors: the template's raise_exception("...") (message quoted, prefixed
  // "the chat template rejected the messages: "), a feature outside the subset met while
  // rendering, or a type error, each with its template line and column.
  Result<std::string> render(const nlohmann::ordered_json& variables) const;

 private:
  std::shared_ptr<const detail::jinja::Program> program_;
};

// A model's chat template with the variables its tokenizer_config.json gives it.
class ChatFormat {
 public:
  // The template of --chat-template FILE when template_file is not empty, else the model
  // directory's chat_template.jinja, else tokenizer_config.json's "chat_template" (a string, or
  // a list of {name, template} of which "default" is taken). For a GGUF file (--model
  // FILE.gguf): its tokenizer.chat_template, with bos_token / eos_token from the file's token
  // ids. std::nullopt when there is none (a preset, a directory or GGUF file without one). The
  // string-valued special tokens of tokenizer_config.json (bos_token, eos_token, ...) become
  // variables. User errors: an unreadable file or a template that does not parse.
  static Result<std::optional<ChatFormat>> load(const std::string& model,
                                                const std::string& template_file);
  static ChatFormat from(ChatTemplate chat_template, std::string origin,
                         nlohmann::ordered_json variables);

  // messages: an array of {"role", "content", ...} objects, passed to the template as is.
  // extra_variables: more variables (tools, enable_thinking: vLLM's chat_template_kwargs), an
  // object or nullptr.
  Result<std::string> render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                             const nlohmann::ordered_json* extra_variables = nullptr) const;
  // Where the template came from, for logs: "tokenizer_config.json", "FILE".
  const std::string& origin() const { return origin_; }

 private:
  ChatTemplate template_;
  std::string origin_;
  std::shared_ptr<const nlohmann::ordered_json> variables_;  // an object
};

}  // namespace ib
