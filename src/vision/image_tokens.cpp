// Image placeholder expansion.
#include "vision/image_tokens.h"

#include <string>
#include <vector>

namespace ib {

Result<ExpandedPrompt> expand_image_tokens(std::span<const int32_t> token_ids,
                                           int32_t image_token_id, int64_t tokens_per_image,
                                           int64_t num_images) {
  IB_ASSERT(tokens_per_image > 0 && num_images >= 0, "expand_image_tokens: bad counts");
  const std::vector<int64_t> counts(static_cast<size_t>(num_images), tokens_per_image);
  return expand_image_tokens(token_ids, image_token_id, counts);
}

Result<ExpandedPrompt> expand_image_tokens(std::span<const int32_t> token_ids,
                                           int32_t image_token_id,
                                           std::span<const int64_t> tokens_per_image) {
  const auto num_images = static_cast<int64_t>(tokens_per_image.size());
  int64_t placeholders = 0, total = 0;
  for (int32_t id : token_ids) placeholders += id == image_token_id;
  for (int64_t n : tokens_per_image) {
    IB_ASSERT(n > 0, "expand_image_tokens: an image of no tokens");
    total += n;
  }
  if (placeholders != num_images) {
    return user_error("the prompt holds " + std::to_string(placeholders) +
                      " image placeholder token(s) (id " + std::to_string(image_token_id) +
                      ") for " + std::to_string(num_images) +
                      " image(s); put one placeholder where each image goes");
  }
  ExpandedPrompt out;
  out.token_ids.reserve(token_ids.size() + static_cast<size_t>(total - num_images));
  for (int32_t id : token_ids) {
    if (id != image_token_id) {
      out.token_ids.push_back(id);
      continue;
    }
    const int64_t n = tokens_per_image[out.image_start.size()];
    out.image_start.push_back(static_cast<int64_t>(out.token_ids.size()));
    out.token_ids.insert(out.token_ids.end(), static_cast<size_t>(n), id);
  }
  return out;
}

}  // namespace ib
