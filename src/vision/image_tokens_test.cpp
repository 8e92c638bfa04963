// Placeholder expansion: positions of each image's visual tokens, and a count mismatch refused.
#include "vision/image_tokens.h"

#include <gtest/gtest.h>

namespace ib {
namespace {

TEST(ExpandImageTokens, EachPlaceholderBecomesTheImagesTokens) {
  const std::vector<int32_t> ids = {1, 9, 5, 9, 9, 2};
  auto got = expand_image_tokens(ids, 9, 3, 3);
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(got->token_ids, (std::vector<int32_t>{1, 9, 9, 9, 5, 9, 9, 9, 9, 9, 9, 2}));
  EXPECT_EQ(got->image_start, (std::vector<int64_t>{1, 5, 8}));
  auto none = expand_image_tokens(std::vector<int32_t>{1, 2}, 9, 576, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->token_ids.size(), 2u);
}

TEST(ExpandImageTokens, AMismatchNamesBothCounts) {
  auto r = expand_image_tokens(std::vector<int32_t>{1, 9, 2}, 9, 576, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kUser);
  EXPECT_NE(r.error().message.find("holds 1 image placeholder token(s) (id 9) for 2 image(s)"),
            std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace ib
