// The OpenAI-compatible request protocol: a JSON body of /v1/completions or /v1/chat/completions
// parsed into a GenerationCall, or an ApiError that becomes an HTTP 4xx with an OpenAI-style body.
// Pure functions with no I/O: the fuzz target (fuzz/server_request_fuzz.cpp) drives them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace ib {

// {"error": {"message", "type", "param", "code"}} with the HTTP status it is sent with.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, empty when none
  std::string code;   // machine-readable, e.g. "invalid_type"; empty when none
};

enum class ApiKind { kCompletions, kChat };

// An image_url content part, loaded later by the served model's ImagePrompter (server.h).
struct ChatImage {
  std::string param;  // the part, for errors: "messages[0].content[1]"
  std::string url;    // image_url.url: a data: URL, or file:// where the server allows it
};

// The text that stands for an image part in ChatMessage::content (LLaVA's "<image>"): the rendered
// prompt holds one per image, where the model's visual tokens go.
inline constexpr std::string_view kImagePlaceholder = "<image>";

struct ChatMessage {
  std::string role;
  std::string content;            // text parts joined; kImagePlaceholder for each image part
  std::vector<ChatImage> images;  // the image_url parts, in order
};

// A validated generation request, before tokenization.
struct GenerationCall {
  ApiKind kind = ApiKind::kCompletions;
  std::string model;                   // empty: the served model
  std::string prompt_text;             // completions with a text prompt
  std::vector<int32_t> prompt_tokens;  // completions with a token-id prompt
  std::vector<ChatMessage> messages;   // chat
  std::optional<int> max_tokens;       // absent: completions 16, chat the rest of the context
  float temperature = 1.0f;            // OpenAI's default
  float top_p = 1.0f;
  int top_k = 0;  // <= 0: off (vLLM uses -1)
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool continuous_usage = false;  // stream_options.continuous_usage_stats (vLLM): usage per chunk
};

struct ParseLimits {
  size_t max_prompt_tokens = 1 << 20;
  size_t max_stop_strings = 16;
  size_t max_messages = 4096;
};

// Parses and type-checks a request body. Errors name the field ("param") and say what is wrong.
// Never throws, whatever the bytes.
std::variant<GenerationCall, ApiError> parse_generation_call(std::string_view body, ApiKind kind,
                                                             const ParseLimits& limits = {});

// What the server knows about its model, to check a call against it.
struct ServedLora {
  std::string name;
  std::string path;
};
struct ServedModel {
  std::string name;
  int max_model_len = 0;
  int vocab_size = 0;
  std::vector<ServedLora> lora_adapters;  // loaded LoRA adapters, served under their names
  // Whether name is the base model or a loaded adapter (an empty name is the base model).
  bool serves(const std::string& asked) const;
  bool is_adapter(const std::string& asked) const;
};

// The 404 model_not_found (vLLM's NotFoundError) for a model or adapter the server does not
// serve, listing what it serves.
ApiError model_not_found(const std::string& asked, const ServedModel& model);

// Checks a tokenized call against the model: model name (the base model or a loaded LoRA adapter;
// another: model_not_found), token ids inside the vocabulary, an
// empty prompt, max_tokens against the context. Returns the max_tokens to generate.
std::variant<int, ApiError> check_against_model(const GenerationCall& call, int prompt_len,
                                                const std::vector<int32_t>& prompt_tokens,
                                                const ServedModel& model);

// A plain, documented chat template (dummy presets have no Jinja template, and none is
// interpreted): "<|role|>\ncontent\n" per message, then "<|assistant|>\n".
std::string render_chat(const std::vector<ChatMessage>& messages);

// A 400 naming the offending field (param), with a machine-readable code.
ApiError bad_field(std::string param, std::string message, std::string code = "invalid_value");

// The JSON body of an error.
std::string error_body(const ApiError& error);

// JSON string literal (with quotes) of arbitrary bytes: invalid UTF-8 becomes U+FFFD, control
// characters are escaped. Used for every string the server writes per token (fast path).
void append_json_string(std::string& out, std::string_view bytes);

// The longest prefix of bytes that does not end inside a UTF-8 sequence (a token may carry half
// of a character; the rest comes with the next token).
size_t complete_utf8_prefix(std::string_view bytes);

}  // namespace ib
