// Renders conversations with a model directory's chat template, for chat_template_npm_test.
// Usage: chat_template_fixture MODEL_DIR CASES_JSON [TOKENIZER_DIR]
//   CASES_JSON: [{"messages": [...], "add_generation_prompt": bool, "variables": {...}}, ...]
// Prints one JSON line per case: {"text": "...", "ids": [...]} or {"error": "..."}; ids (the text
// tokenized as the server tokenizes a rendered prompt) when TOKENIZER_DIR is given.
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/chat_template.h"
#include "model/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::cerr << "usage: chat_template_fixture MODEL_DIR CASES_JSON [TOKENIZER_DIR]\n";
    return 2;
  }
  std::unique_ptr<ib::Tokenizer> tokenizer;
  if (argc == 4) {
    auto loaded = ib::load_tokenizer(argv[3]);
    if (!loaded.ok()) {
      std::cerr << loaded.error().message << "\n";
      return 1;
    }
    tokenizer = std::move(loaded).value();
  }
  auto format = ib::ChatFormat::load(argv[1], "");
  if (!format.ok() || !format->has_value()) {
    std::cerr << (format.ok() ? "no chat template" : format.error().message) << "\n";
    return 1;
  }
  std::ifstream in(argv[2]);
  std::stringstream text;
  text << in.rdbuf();
  const auto cases = nlohmann::ordered_json::parse(text.str(), nullptr, false);
  if (!cases.is_array()) {
    std::cerr << argv[2] << ": not a JSON array\n";
    return 1;
  }
  for (const auto& c : cases) {
    const nlohmann::ordered_json variables = c.value("variables", nlohmann::ordered_json::object());
    auto out =
        (*format)->render(c.at("messages"), c.value("add_generation_prompt", false), &variables);
    nlohmann::ordered_json line;
    if (out.ok()) {
      line["text"] = *out;
      if (tokenizer) line["ids"] = tokenizer->encode_without_specials(*out);
    } else {
      line["error"] = out.error().message;
    }
    std::cout << line.dump() << "\n";
  }
  return 0;
}
