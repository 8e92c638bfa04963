// A compiled Unicode regular expression (ICU regex, matched over UTF-8), for the Split
// pre-tokenizer and Replace normalizer patterns of tokenizer.json files. Immutable after
// compile(); find_all may be called from any thread (each call has its own match data).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"

namespace ib::detail {

class Regex {
 public:
  // User error: a pattern PCRE2 cannot compile, with its message and offset.
  static Result<Regex> compile(std::string_view pattern);

  // The non-overlapping, non-empty matches of the pattern in text as byte ranges [begin, end),
  // left to right. Bytes that are not valid UTF-8 never match a character class.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
};

}  // namespace ib::detail
