#include "model/tokenizer.h"

#include <gtest/gtest.h>

namespace ib {
namespace {

TEST(ByteTokenizer, EncodesEachByteWithOffset) {
  const auto tok = make_byte_tokenizer();
  EXPECT_EQ(tok->name(), "byte");
  EXPECT_EQ(tok->encode("Hi!"), (std::vector<int32_t>{'H' + 3, 'i' + 3, '!' + 3}));
  EXPECT_TRUE(tok->encode("").empty());
  // Multi-byte UTF-8 ("é" = C3 A9) and bytes >= 0x80 map to ids above 130, not negative ids.
  EXPECT_EQ(tok->encode("\xC3\xA9"), (std::vector<int32_t>{0xC3 + 3, 0xA9 + 3}));
  EXPECT_EQ(tok->encode(std::string(1, '\0')), (std::vector<int32_t>{3}));
  EXPECT_EQ(tok->encode("\xFF"), (std::vector<int32_t>{258}));
}

TEST(ByteTokenizer, RoundTripsEveryByte) {
  const auto tok = make_byte_tokenizer();
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(tok->decode(tok->encode(all)), all);
  EXPECT_EQ(tok->decode(tok->encode("naïve café")), "naïve café");
}

TEST(ByteTokenizer, DecodeDropsSpecialIdsAndMarksForeignOnes) {
  const auto tok = make_byte_tokenizer();
  EXPECT_EQ(tok->decode({kByteBosId, 'a' + 3, kBytePadId, 'b' + 3, kByteEosId}), "ab");
  EXPECT_EQ(tok->decode({'a' + 3, 259, 31999, -1}), "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

}  // namespace
}  // namespace ib
