// Fuzzes the tokenizer.json reader: arbitrary bytes must give a tokenizer or an error, never a
// crash; an accepted tokenizer must encode and decode texts (valid UTF-8 or not) to ids that are
// non-negative and back without crashing.
#include <cstdint>
#include <string>
#include <string_view>

#include "core/assert.h"
#include "model/bpe_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  const auto tokenizer = ib::parse_bpe_tokenizer(json, "fuzz");
  if (!tokenizer.ok()) {
    IB_ASSERT(!tokenizer.error().message.empty(), "an error without a message");
    return 0;
  }
  const std::string texts[] = {"",
                               "hello world",
                               "  12345 \t\n",
                               "\xE4\xB8\xAD\xE6\x96\x87 caf\xC3\xA9",
                               "<s>x</s>",
                               "\xFF\xC3 broken",
                               std::string(json.substr(0, 64))};
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = (*tokenizer)->encode(text);
    for (const int32_t id : ids) IB_ASSERT(id >= 0, "a negative token id");
    (void)(*tokenizer)->decode(ids);
  }
  (void)(*tokenizer)->decode({-1, 0, 1, 1 << 30});
  return 0;
}
