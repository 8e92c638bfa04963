// tokenizer.json normalizers and the shared Pattern (tokenizer_steps.h); Unicode normal forms and
// case mapping come from ICU.
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/detail/tokenizer_steps.h"

namespace ib::detail {
namespace {

using nlohmann::json;

constexpr std::string_view kSupported =
    "Prepend, Replace, NFC, NFD, NFKC, NFKD, Lowercase, Sequence";

bool is_ascii(std::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

std::string icu_normalize(NormalizerStep::Kind kind, const std::string& text) {
  if (is_ascii(text) && kind != NormalizerStep::Kind::kLowercase) return text;
  icu::UnicodeString s = icu::UnicodeString::fromUTF8(text);
  if (kind == NormalizerStep::Kind::kLowercase) {
    s.toLower(icu::Locale::getRoot());
  } else {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = nullptr;
    switch (kind) {
      case NormalizerStep::Kind::kNfd:
        n = icu::Normalizer2::getNFDInstance(status);
        break;
      case NormalizerStep::Kind::kNfkc:
        n = icu::Normalizer2::getNFKCInstance(status);
        break;
      case NormalizerStep::Kind::kNfkd:
        n = icu::Normalizer2::getNFKDInstance(status);
        break;
      default:
        n = icu::Normalizer2::getNFCInstance(status);
        break;
    }
    if (U_FAILURE(status)) return text;
    icu::UnicodeString out = n->normalize(s, status);
    if (U_FAILURE(status)) return text;
    s = out;
  }
  std::string result;
  s.toUTF8String(result);
  return result;
}

}  // namespace

Result<Pattern> parse_pattern(const json& node, std::string_view component) {
  Pattern p;
  if (node.is_object() && node.contains("String") && node["String"].is_string()) {
    p.literal = node["String"].get<std::string>();
    if (p.literal.empty()) return user_error(fmt::format("{}: an empty String pattern", component));
    return p;
  }
  if (node.is_object() && node.contains("Regex") && node["Regex"].is_string()) {
    auto regex = Regex::compile(node["Regex"].get<std::string>());
    if (!regex.ok()) return user_error(fmt::format("{}: {}", component, regex.error().message));
    p.regex = std::move(regex).value();
    return p;
  }
  return user_error(
      fmt::format("{}: pattern is neither {{\"String\": ...}} nor {{\"Regex\": ...}}", component));
}

std::string Pattern::replace_all(std::string_view text, std::string_view with) const {
  std::string out;
  size_t at = 0;
  for (const auto& [begin, end] : find_all(text)) {
    out.append(text.substr(at, begin - at));
    out.append(with);
    at = end;
  }
  out.append(text.substr(at));
  return out;
}

std::vector<std::pair<size_t, size_t>> Pattern::find_all(std::string_view text) const {
  if (regex) return regex->find_all(text);
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t at = text.find(literal); at != std::string_view::npos;
       at = text.find(literal, at + literal.size())) {
    out.emplace_back(at, at + literal.size());
  }
  return out;
}

Result<Normalizer> parse_normalizer(const json& node) {
  Normalizer steps;
  if (node.is_null()) return steps;
  const std::string type = node.is_object() ? node.value("type", "") : "";
  if (type == "Sequence") {
    for (const json& child : node.value("normalizers", json::array())) {
      IB_ASSIGN_OR_RETURN(Normalizer inner, parse_normalizer(child));
      steps.insert(steps.end(), inner.begin(), inner.end());
    }
    return steps;
  }
  NormalizerStep step;
  if (type == "Prepend") {
    step.kind = NormalizerStep::Kind::kPrepend;
    step.text = node.value("prepend", "");
  } else if (type == "Replace") {
    step.kind = NormalizerStep::Kind::kReplace;
    IB_ASSIGN_OR_RETURN(step.pattern,
                        parse_pattern(node.value("pattern", json()), "normalizer Replace"));
    step.text = node.value("content", "");
  } else if (type == "NFC") {
    step.kind = NormalizerStep::Kind::kNfc;
  } else if (type == "NFD") {
    step.kind = NormalizerStep::Kind::kNfd;
  } else if (type == "NFKC") {
    step.kind = NormalizerStep::Kind::kNfkc;
  } else if (type == "NFKD") {
    step.kind = NormalizerStep::Kind::kNfkd;
  } else if (type == "Lowercase") {
    step.kind = NormalizerStep::Kind::kLowercase;
  } else {
    return user_error(fmt::format("normalizer '{}' is not supported; inferbench reads {}",
                                  type.substr(0, 64), kSupported));
  }
  steps.push_back(std::move(step));
  return steps;
}

std::string normalize(const Normalizer& normalizer, std::string text) {
  for (const NormalizerStep& step : normalizer) {
    switch (step.kind) {
      case NormalizerStep::Kind::kPrepend:
        if (!text.empty()) text.insert(0, step.text);
        break;
      case NormalizerStep::Kind::kReplace:
        text = step.pattern.replace_all(text, step.text);
        break;
      default:
        text = icu_normalize(step.kind, text);
        break;
    }
  }
  return text;
}

}  // namespace ib::detail
