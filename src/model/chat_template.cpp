// Chat templates: the front door over detail/jinja_*, and where a model's template is found.
#include "model/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/detail/jinja_ast.h"
#include "model/gguf_file.h"
#include "model/gguf_model.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using detail::jinja::TemplateError;

Error template_error(const TemplateError& e) {
  const std::string where = fmt::format("line {}, column {}", e.pos.line, e.pos.column);
  switch (e.kind) {
    case TemplateError::Kind::kRaised:
      return user_error(fmt::format(
          "the chat template rejected the messages: {} (raise_exception at {})", e.what(), where));
    case TemplateError::Kind::kUnsupported:
      return user_error(
          fmt::format("chat template {}: unsupported Jinja feature: {}", where, e.what()));
    case TemplateError::Kind::kSyntax:
      return user_error(fmt::format("malformed chat template at {}: {}", where, e.what()));
    case TemplateError::Kind::kRender:
      break;
  }
  return user_error(fmt::format("chat template {}: {}", where, e.what()));
}

Result<std::string> read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return user_error(fmt::format("cannot read chat template file {}", path.string()));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// tokenizer_config.json's special tokens: a string, or an AddedToken object with "content".
std::optional<std::string> token_text(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(const std::string& source) {
  try {
    ChatTemplate t;
    t.program_ = std::make_shared<const detail::jinja::Program>(detail::jinja::parse(source));
    return t;
  } catch (const TemplateError& e) {
    return template_error(e);
  }
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  try {
    detail::jinja::Dict globals;
    if (variables.is_object()) {
      for (const auto& [k, v] : variables.items())
        globals.emplace_back(k, detail::jinja::from_json(v));
    }
    return detail::jinja::render(*program_, globals);
  } catch (const TemplateError& e) {
    return template_error(e);
  }
}

ChatFormat ChatFormat::from(ChatTemplate chat_template, std::string origin,
                            nlohmann::ordered_json variables) {
  ChatFormat f;
  f.template_ = std::move(chat_template);
  f.origin_ = std::move(origin);
  f.variables_ = std::make_shared<const nlohmann::ordered_json>(std::move(variables));
  return f;
}

namespace {

// llama.cpp's GGUF keys: tokenizer.chat_template, and the BOS/EOS texts from
// tokenizer.ggml.{bos,eos}_token_id over tokenizer.ggml.tokens (the variables transformers'
// tokenizer_config.json would give). template_file, when not empty, replaces the file's template.
Result<std::optional<ChatFormat>> load_gguf_chat_format(const std::string& path,
                                                        const std::string& template_file) {
  IB_ASSIGN_OR_RETURN(const auto mapped, GgufModelFile::open(path));
  const GgufFile& file = mapped->file();
  std::string source;
  std::string origin = template_file;
  if (!template_file.empty()) {
    IB_ASSIGN_OR_RETURN(source, read_text(template_file));
  } else {
    const GgufValue* value = file.find("tokenizer.chat_template");
    if (value == nullptr) return std::optional<ChatFormat>();
    origin = path + " (tokenizer.chat_template)";
    const std::string* text = value->as_string();
    if (text == nullptr) {
      return user_error(
          fmt::format("{}: not a string but {}", origin, gguf_value_type_name(value->type)));
    }
    source = *text;
  }
  auto parsed = ChatTemplate::parse(source);
  if (!parsed.ok()) return user_error(origin + ": " + parsed.error().message);
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  const GgufValue* tokens = file.find("tokenizer.ggml.tokens");
  const GgufArray* texts = tokens ? tokens->as_array() : nullptr;
  for (const char* name : {"bos", "eos"}) {
    const GgufValue* id = file.find(fmt::format("tokenizer.ggml.{}_token_id", name));
    const std::optional<int64_t> i = id ? id->as_int() : std::nullopt;
    if (!i || texts == nullptr || *i < 0 || *i >= static_cast<int64_t>(texts->items.size()))
      continue;
    if (const std::string* text = texts->items[static_cast<size_t>(*i)].as_string())
      variables[fmt::format("{}_token", name)] = *text;
  }
  return std::optional<ChatFormat>(
      ChatFormat::from(std::move(parsed).value(), origin, std::move(variables)));
}

}  // namespace

Result<std::optional<ChatFormat>> ChatFormat::load(const std::string& model,
                                                   const std::string& template_file) {
  std::error_code ec;
  const fs::path dir(model);
  const bool is_dir = !model.empty() && fs::is_directory(dir, ec);
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (is_dir && fs::exists(dir / "tokenizer_config.json", ec)) {
    IB_ASSIGN_OR_RETURN(const std::string text, read_text(dir / "tokenizer_config.json"));
    config = nlohmann::ordered_json::parse(text, nullptr, false);
    if (config.is_discarded() || !config.is_object()) {
      return user_error(
          fmt::format("{}: not a JSON object", (dir / "tokenizer_config.json").string()));
    }
  }
  std::string source;
  std::string origin;
  if (!model.empty() && !is_dir && names_gguf_file(model)) {
    return load_gguf_chat_format(model, template_file);
  }
  if (!template_file.empty()) {
    IB_ASSIGN_OR_RETURN(source, read_text(template_file));
    origin = template_file;
  } else if (is_dir && fs::exists(dir / "chat_template.jinja", ec)) {
    IB_ASSIGN_OR_RETURN(source, read_text(dir / "chat_template.jinja"));
    origin = (dir / "chat_template.jinja").string();
  } else if (config.contains("chat_template")) {
    const auto& t = config["chat_template"];
    origin = (dir / "tokenizer_config.json").string();
    if (t.is_string()) {
      source = t.get<std::string>();
    } else if (t.is_array()) {
      for (const auto& named : t) {
        if (named.is_object() && named.value("name", "") == "default" &&
            named.contains("template") && named["template"].is_string()) {
          source = named["template"].get<std::string>();
        }
      }
      if (source.empty()) {
        return user_error(origin + ": chat_template is a list without a \"default\" template");
      }
    } else {
      return user_error(origin + ": chat_template is neither a string nor a list of templates");
    }
  } else {
    return std::optional<ChatFormat>();
  }
  auto parsed = ChatTemplate::parse(source);
  if (!parsed.ok()) return user_error(origin + ": " + parsed.error().message);
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  for (const auto& [k, v] : config.items()) {
    if (k.size() > 6 && k.compare(k.size() - 6, 6, "_token") == 0) {
      if (auto text = token_text(v)) variables[k] = *text;
    }
  }
  return std::optional<ChatFormat>(from(std::move(parsed).value(), origin, std::move(variables)));
}

Result<std::string> ChatFormat::render(const nlohmann::ordered_json& messages,
                                       bool add_generation_prompt,
                                       const nlohmann::ordered_json* extra_variables) const {
  nlohmann::ordered_json variables = *variables_;
  if (extra_variables && extra_variables->is_object()) {
    for (const auto& [k, v] : extra_variables->items()) variables[k] = v;
  }
  variables["messages"] = messages;
  variables["add_generation_prompt"] = add_generation_prompt;
  return template_.render(variables);
}

}  // namespace ib
