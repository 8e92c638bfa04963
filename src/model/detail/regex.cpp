// ICU-backed Regex (regex.h): matched over the UTF-8 bytes in place (a UTF-8 UText), so match
// offsets are byte offsets; ICU's Unicode tables are those its normalizers use too.
#include "model/detail/regex.h"

#include <unicode/regex.h>
#include <unicode/utext.h>

#include <fmt/format.h>

namespace ib::detail {
namespace {

constexpr int32_t kMatchTimeLimit = 1000;  // ICU's steps, about a millisecond each

}  // namespace

struct Regex::Code {
  std::unique_ptr<icu::RegexPattern> pattern;
};

Result<Regex> Regex::compile(std::string_view pattern) {
  UParseError where{};
  UErrorCode status = U_ZERO_ERROR;
  const icu::UnicodeString source = icu::UnicodeString::fromUTF8(
      icu::StringPiece(pattern.data(), static_cast<int32_t>(pattern.size())));
  std::unique_ptr<icu::RegexPattern> compiled(icu::RegexPattern::compile(source, 0, where, status));
  if (U_FAILURE(status) || compiled == nullptr) {
    return user_error(fmt::format("regex '{}' does not compile: {} at offset {}",
                                  pattern.substr(0, 200), u_errorName(status), where.offset));
  }
  auto code = std::make_shared<Code>();
  code->pattern = std::move(compiled);
  Regex regex;
  regex.code_ = std::move(code);
  return regex;
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  UErrorCode status = U_ZERO_ERROR;
  UText* input = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status);
  std::unique_ptr<icu::RegexMatcher> matcher(code_->pattern->matcher(status));
  if (U_FAILURE(status) || matcher == nullptr) {
    utext_close(input);
    return matches;
  }
  matcher->reset(input);
  // A pathological pattern (nested quantifiers) gives up after about a second per match rather
  // than hanging; the matches found so far stand.
  matcher->setTimeLimit(kMatchTimeLimit, status);
  while (matcher->find(status) && U_SUCCESS(status)) {
    const int64_t begin = matcher->start64(status);
    const int64_t end = matcher->end64(status);
    if (U_FAILURE(status)) break;
    if (end > begin) matches.emplace_back(static_cast<size_t>(begin), static_cast<size_t>(end));
  }
  matcher.reset();
  utext_close(input);
  return matches;
}

}  // namespace ib::detail
