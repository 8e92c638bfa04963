// tokenizer.json pre-tokenizers (tokenizer_steps.h): each step splits every piece further, in
// the order the file lists them; ByteLevel also maps bytes to GPT-2's visible characters.
#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/detail/split_regexes.h"
#include "model/detail/tokenizer_steps.h"

namespace ib::detail {
namespace {

using nlohmann::json;

constexpr std::string_view kSupported = "ByteLevel, Split, Digits, Metaspace, Sequence";
constexpr std::string_view kMetaspaceDefault = "\xE2\x96\x81";  // U+2581

struct Segment {
  size_t begin = 0;
  size_t end = 0;
  bool is_match = false;
};

// The pieces of s cut at the matches, joined or dropped as behavior says (HF tokenizers'
// SplitDelimiterBehavior).
void split_piece(std::string_view s, const std::vector<std::pair<size_t, size_t>>& matches,
                 SplitBehavior behavior, bool invert, std::vector<std::string>& out) {
  std::vector<Segment> segments;
  size_t at = 0;
  for (const auto& [begin, end] : matches) {
    if (begin > at) segments.push_back({at, begin, invert});
    segments.push_back({begin, end, !invert});
    at = end;
  }
  if (at < s.size()) segments.push_back({at, s.size(), invert});

  std::vector<Segment> merged;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      merged = segments;
      break;
    case SplitBehavior::kRemoved:
      for (const Segment& g : segments) {
        if (!g.is_match) merged.push_back(g);
      }
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Segment& g : segments) {
        if (g.is_match && !previous_match && !merged.empty()) {
          merged.back().end = g.end;
        } else {
          merged.push_back(g);
        }
        previous_match = g.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && !merged.empty()) {
          merged.back().begin = it->begin;
        } else {
          merged.push_back(*it);
        }
        previous_match = it->is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Segment& g : segments) {
        if (g.is_match && previous_match) {
          merged.back().end = g.end;
        } else {
          merged.push_back(g);
        }
        previous_match = g.is_match;
      }
      break;
    }
  }
  for (const Segment& g : merged) {
    if (g.end > g.begin) out.emplace_back(s.substr(g.begin, g.end - g.begin));
  }
}

Result<SplitBehavior> parse_behavior(const std::string& name) {
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return user_error(fmt::format(
      "pre-tokenizer Split behavior '{}' is not one of Isolated, Removed, MergedWithPrevious, "
      "MergedWithNext, Contiguous",
      name.substr(0, 64)));
}

std::string replace_spaces(std::string_view s, std::string_view with) {
  std::string out;
  out.reserve(s.size() + 8);
  for (const char c : s) {
    if (c == ' ') {
      out.append(with);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string map_bytes(std::string_view s) {
  std::string out;
  out.reserve(s.size() * 2);
  for (const char c : s) append_utf8(out, byte_to_codepoint()[static_cast<unsigned char>(c)]);
  return out;
}

void apply_step(const PreTokenizerStep& step, std::vector<std::string>& pieces,
                bool first_section) {
  std::vector<std::string> out;
  out.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::string& piece = pieces[i];
    switch (step.kind) {
      case PreTokenizerStep::Kind::kSplit:
      case PreTokenizerStep::Kind::kDigits:
        split_piece(piece, step.pattern.find_all(piece), step.behavior, step.invert, out);
        break;
      case PreTokenizerStep::Kind::kMetaspace: {
        std::string s = replace_spaces(piece, step.replacement);
        const bool prepend =
            step.add_prefix_space || (step.prepend_first_only && first_section && i == 0);
        if (prepend && s.compare(0, step.replacement.size(), step.replacement) != 0) {
          s = step.replacement + s;
        }
        if (step.split) {
          split_piece(s, step.pattern.find_all(s), SplitBehavior::kMergedWithNext, false, out);
        } else {
          out.push_back(std::move(s));
        }
        break;
      }
      case PreTokenizerStep::Kind::kByteLevel: {
        if (step.add_prefix_space && piece.front() != ' ') piece = " " + piece;
        std::vector<std::string> split;
        if (step.use_regex) {
          split_piece(piece, step.pattern.find_all(piece), SplitBehavior::kIsolated, false, split);
        } else {
          split.push_back(std::move(piece));
        }
        for (const std::string& s : split) out.push_back(map_bytes(s));
        break;
      }
    }
  }
  pieces.swap(out);
}

Result<Pattern> regex_pattern(std::string_view regex) {
  IB_ASSIGN_OR_RETURN(Regex compiled, Regex::compile(regex));
  Pattern p;
  p.regex = std::move(compiled);
  return p;
}

Status parse_into(const json& node, PreTokenizer& pre) {
  if (node.is_null()) return Ok{};
  const std::string type = node.is_object() ? node.value("type", "") : "";
  PreTokenizerStep step;
  if (type == "Sequence") {
    for (const json& child : node.value("pretokenizers", json::array())) {
      IB_TRY(parse_into(child, pre));
    }
    return Ok{};
  }
  if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    step.add_prefix_space = node.value("add_prefix_space", false);
    step.use_regex = node.value("use_regex", true);
    if (step.use_regex) {
      IB_ASSIGN_OR_RETURN(step.pattern, regex_pattern(kGpt2Regex));
    }
    pre.byte_level = true;
  } else if (type == "Split") {
    step.kind = PreTokenizerStep::Kind::kSplit;
    IB_ASSIGN_OR_RETURN(step.pattern,
                        parse_pattern(node.value("pattern", json()), "pre-tokenizer Split"));
    IB_ASSIGN_OR_RETURN(step.behavior, parse_behavior(node.value("behavior", "Isolated")));
    step.invert = node.value("invert", false);
  } else if (type == "Digits") {
    step.kind = PreTokenizerStep::Kind::kDigits;
    step.individual_digits = node.value("individual_digits", false);
    IB_ASSIGN_OR_RETURN(step.pattern, regex_pattern("\\p{N}"));
    step.behavior = step.individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
  } else if (type == "Metaspace") {
    step.kind = PreTokenizerStep::Kind::kMetaspace;
    step.replacement = node.value("replacement", std::string(kMetaspaceDefault));
    if (step.replacement.empty()) step.replacement = kMetaspaceDefault;
    step.split = node.value("split", true);
    const std::string scheme =
        node.value("prepend_scheme", node.value("add_prefix_space", true) ? "always" : "never");
    if (scheme == "first") {
      step.prepend_first_only = true;
    } else if (scheme == "always") {
      step.add_prefix_space = true;
    } else if (scheme != "never") {
      return user_error(fmt::format(
          "pre-tokenizer Metaspace prepend_scheme '{}' is not one of always, first, never",
          scheme.substr(0, 64)));
    }
    step.pattern.literal = step.replacement;
  } else {
    return user_error(fmt::format("pre-tokenizer '{}' is not supported; inferbench reads {}",
                                  type.substr(0, 64), kSupported));
  }
  pre.steps.push_back(std::move(step));
  return Ok{};
}

}  // namespace

Result<PreTokenizer> parse_pre_tokenizer(const json& node) {
  PreTokenizer pre;
  IB_TRY(parse_into(node, pre));
  return pre;
}

std::vector<std::string> pre_tokenize(const PreTokenizer& pre, std::string_view text,
                                      bool first_section) {
  std::vector<std::string> pieces;
  if (text.empty()) return pieces;
  pieces.emplace_back(text);
  for (const PreTokenizerStep& step : pre.steps) apply_step(step, pieces, first_section);
  return pieces;
}

}  // namespace ib::detail
