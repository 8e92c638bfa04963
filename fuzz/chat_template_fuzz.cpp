// Fuzzes the chat-template parser and interpreter: arbitrary bytes as a template must parse to a
// template or to an error with a message, never crash; an accepted template must render a small
// conversation to text or to an error, within the renderer's step and output limits.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/assert.h"
#include "model/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  const auto parsed = ib::ChatTemplate::parse(source);
  if (!parsed.ok()) {
    IB_ASSERT(!parsed.error().message.empty(), "an error without a message");
    return 0;
  }
  nlohmann::ordered_json variables = {
      {"bos_token", "<s>"},
      {"eos_token", "</s>"},
      {"add_generation_prompt", true},
      {"messages",
       {{{"role", "system"}, {"content", "Be brief."}},
        {{"role", "user"}, {"content", "Hi \xE4\xB8\xAD\xE6\x96\x87 \xFF"}},
        {{"role", "assistant"}, {"content", "<think>\nx\n</think>\n\nHello"}}}},
      {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}},
  };
  const auto rendered = parsed->render(variables);
  if (!rendered.ok()) IB_ASSERT(!rendered.error().message.empty(), "an error without a message");
  return 0;
}
