// JSONL datasets: one request per line, text or token ids, optional output length and images.
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "workload/workload.h"

namespace ib {
namespace {

using nlohmann::json;

struct Line {
  std::vector<int32_t> tokens;  // (input_len)
  std::string text;
  int output_len = 0;               // 0: from --output-len
  std::vector<std::string> images;  // image files
};

// "image": "file" or "images": ["file", ...]; relative paths from dir, each a regular file.
Status read_images(const json& j, const std::string& where, const std::filesystem::path& dir,
                   std::vector<std::string>& out) {
  if (j.contains("image") && j.contains("images")) {
    return user_error(fmt::format("{}: give \"image\" or \"images\", not both", where));
  }
  const bool one = j.contains("image");
  const json& field = one ? j["image"] : j["images"];
  const char* name = one ? "image" : "images";
  const json list = one ? json::array({field}) : field;
  if (!list.is_array() || (!one && list.empty())) {
    return user_error(fmt::format("{}: \"images\" must be a non-empty array of file paths", where));
  }
  for (const json& p : list) {
    if (!p.is_string() || p.get<std::string>().empty()) {
      return user_error(
          fmt::format("{}: \"{}\" must hold file paths (strings), got {}", where, name, p.dump()));
    }
    std::filesystem::path path(p.get<std::string>());
    if (path.is_relative()) path = dir / path;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      return user_error(
          fmt::format("{}: image {} is not a file (relative paths are read from "
                      "the dataset's directory)",
                      where, path.string()));
    }
    out.push_back(path.string());
  }
  return Ok{};
}

Result<Line> parse_line(const std::string& text, const std::string& where, int vocab_size,
                        const Tokenizer& tokenizer, const std::filesystem::path& dir) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    return user_error(
        fmt::format("{}: not valid JSON ({}); each line must be an object like "
                    "{{\"prompt\": \"text\"}}",
                    where, e.what()));
  }
  if (!j.is_object()) {
    return user_error(fmt::format(
        "{}: expected an object like {{\"prompt\": \"text\"}} or {{\"prompt_token_ids\": [..]}}",
        where));
  }
  Line line;
  if (j.contains("prompt_token_ids")) {
    const json& ids = j["prompt_token_ids"];
    if (!ids.is_array() || ids.empty()) {
      return user_error(fmt::format("{}: \"prompt_token_ids\" must be a non-empty array", where));
    }
    for (const auto& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size) {
        return user_error(
            fmt::format("{}: token id {} is not an integer in [0, {}) (the model's vocabulary)",
                        where, id.dump(), vocab_size));
      }
      line.tokens.push_back(id.get<int32_t>());
    }
  } else if (j.contains("prompt")) {
    if (!j["prompt"].is_string() || j["prompt"].get<std::string>().empty()) {
      return user_error(fmt::format("{}: \"prompt\" must be a non-empty string", where));
    }
    line.text = j["prompt"].get<std::string>();
    line.tokens = tokenizer.encode(line.text);
    for (int32_t id : line.tokens) {
      if (id >= vocab_size) {
        return user_error(
            fmt::format("{}: the {} tokenizer yields id {}, beyond the model's vocabulary of {}",
                        where, tokenizer.name(), id, vocab_size));
      }
    }
  } else {
    return user_error(
        fmt::format("{}: needs \"prompt\" (text) or \"prompt_token_ids\" (array)", where));
  }
  if (j.contains("output_len")) {
    const json& n = j["output_len"];
    if (!n.is_number_integer() || n.get<int64_t>() <= 0 || n.get<int64_t>() > (1 << 30)) {
      return user_error(
          fmt::format("{}: \"output_len\" must be a positive integer (got {})", where, n.dump()));
    }
    line.output_len = n.get<int>();
  }
  if (j.contains("image") || j.contains("images")) {
    IB_TRY(read_images(j, where, dir, line.images));
  }
  return line;
}

// Every line of the dataset, parsed and tokenized, in file order.
Result<std::vector<Line>> read_jsonl_lines(const WorkloadOptions& options,
                                           const Tokenizer& tokenizer) {
  IB_TRY(validate_workload_options(options));
  std::ifstream in(options.dataset_path);
  if (!in) {
    return user_error(
        fmt::format("cannot read dataset {}; check --dataset-path", options.dataset_path));
  }
  std::vector<Line> lines;
  std::string text;
  const std::filesystem::path dir = std::filesystem::path(options.dataset_path).parent_path();
  for (int line_no = 1; std::getline(in, text); ++line_no) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    IB_ASSIGN_OR_RETURN(Line line,
                        parse_line(text, fmt::format("{}:{}", options.dataset_path, line_no),
                                   options.vocab_size, tokenizer, dir));
    lines.push_back(std::move(line));
  }
  if (in.bad()) {
    return user_error(fmt::format("reading dataset {} failed", options.dataset_path));
  }
  if (lines.empty()) {
    return user_error(
        fmt::format("dataset {} holds no prompts; add lines like "
                    "{{\"prompt\": \"text\"}}",
                    options.dataset_path));
  }
  return lines;
}

}  // namespace

Result<std::vector<RequestSpec>> load_jsonl_requests(const WorkloadOptions& options,
                                                     const Tokenizer& tokenizer) {
  IB_ASSIGN_OR_RETURN(const std::vector<Line> lines, read_jsonl_lines(options, tokenizer));
  Rng output_len_rng(options.seed * 4 + 2);
  std::vector<RequestSpec> out(static_cast<size_t>(options.num_prompts));
  for (size_t i = 0; i < out.size(); ++i) {
    const Line& line = lines[i % lines.size()];
    RequestSpec& r = out[i];
    r.id = i;
    r.prompt_tokens = line.tokens;
    r.prompt_text = line.text;
    r.input_len = static_cast<int>(line.tokens.size());
    const int drawn = sample_length(options.output_len, output_len_rng);
    r.output_len = line.output_len > 0 ? line.output_len : drawn;
    for (const std::string& path : line.images) r.images.push_back(RequestImage{path, 0, 0, 0});
  }
  return out;
}

Result<std::vector<std::vector<int32_t>>> dataset_prompts(const WorkloadOptions& options,
                                                          const Tokenizer& tokenizer, int count) {
  if (options.dataset_name != "jsonl") {
    return user_error(fmt::format(
        "--dataset-name {} has no prompts of its own (its prompts are random token ids); "
        "calibration needs real prompts: use --dataset-name jsonl --dataset-path FILE",
        options.dataset_name));
  }
  IB_ASSIGN_OR_RETURN(const std::vector<Line> lines, read_jsonl_lines(options, tokenizer));
  if (count < 1 || static_cast<size_t>(count) > lines.size()) {
    return user_error(fmt::format(
        "--calibration-prompts {}: dataset {} holds {} prompts; use 1 to {} or a larger dataset",
        count, options.dataset_path, lines.size(), lines.size()));
  }
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < count; ++i) out.push_back(lines[static_cast<size_t>(i)].tokens);
  return out;
}

}  // namespace ib
