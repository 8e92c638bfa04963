// `inferbench tokenize`: a model's tokenizer applied to a text or file, so users can check token
// counts against their own tooling (commands.h).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "model/bpe_tokenizer.h"
#include "model/tokenizer.h"

namespace ib {
namespace {

using nlohmann::json;

Result<std::unique_ptr<Tokenizer>> open_tokenizer(const std::string& model) {
  std::error_code ec;
  const std::filesystem::path path(model);
  if (std::filesystem::is_regular_file(path, ec) && path.extension() == ".json") {
    return load_bpe_tokenizer(path);
  }
  if (!has_own_tokenizer(model)) {
    return user_error(fmt::format(
        "--model {}: not a directory with tokenizer.json, a tokenizer.json file or a .gguf file "
        "with a tokenizer",
        model));
  }
  return load_tokenizer(model);
}

Result<std::string> read_input(const TokenizeFlags& f) {
  if (f.file.empty()) return f.text;
  std::ifstream in(f.file, std::ios::binary);
  if (!in) return user_error(fmt::format("--file {}: cannot read it", f.file));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string ids_json(const Tokenizer& tokenizer, std::string_view text) {
  const std::vector<int32_t> ids = tokenizer.encode(text);
  const json line = {{"count", ids.size()}, {"ids", ids}, {"decoded", tokenizer.decode(ids)}};
  return line.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

void add_tokenize_flags(CLI::App& app, TokenizeFlags& f) {
  app.add_option("--model", f.model,
                 "a model directory (tokenizer.json, tokenizer_config.json), a tokenizer.json "
                 "file or a .gguf file")
      ->required();
  auto* text = app.add_option("--text", f.text, "the text to encode");
  auto* file = app.add_option("--file", f.file, "encode this file's contents");
  text->excludes(file);
  app.add_flag("--lines", f.lines,
               "encode each line on its own (without its newline); one JSON object per line");
  app.add_flag("--json", f.json, "print {\"count\", \"ids\", \"decoded\"} as JSON");
}

Result<int> execute_tokenize(const TokenizeFlags& f) {
  if (f.text.empty() && f.file.empty()) return user_error("tokenize needs --text or --file");
  IB_ASSIGN_OR_RETURN(const auto tokenizer, open_tokenizer(f.model));
  IB_ASSIGN_OR_RETURN(const std::string input, read_input(f));
  if (f.lines) {
    std::istringstream lines(input);
    std::string line;
    while (std::getline(lines, line)) std::cout << ids_json(*tokenizer, line) << '\n';
    return kExitOk;
  }
  if (f.json) {
    std::cout << ids_json(*tokenizer, input) << '\n';
    return kExitOk;
  }
  const std::vector<int32_t> ids = tokenizer->encode(input);
  std::cout << "ids: " << fmt::format("{}", fmt::join(ids, " ")) << "\ncount: " << ids.size()
            << '\n';
  return kExitOk;
}

}  // namespace ib
