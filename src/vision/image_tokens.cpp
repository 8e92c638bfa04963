// Image placeholder expansion.
#include "vision/image_tokens.h"

#include <string>

namespace ib {

Result<ExpandedPrompt> expand_image_tokens(std::span<const int32_t> token_ids,
                                           int32_t image_token_id, int64_t tokens_per_image,
                                           int64_t num_images) {
  IB_ASSERT(tokens_per_image > 0 && num_images >= 0, "expand_image_tokens: bad counts");
  int64_t placeholders = 0;
  for (int32_t id : token_ids) placeholders += id == image_token_id;
  if (placeholders != num_images) {
    return user_error("the prompt holds " + std::to_string(placeholders) +
                      " image placeholder token(s) (id " + std::to_string(image_token_id) +
                      ") for " + std::to_string(num_images) +
                      " image(s); put one placeholder where each image goes");
  }
  ExpandedPrompt out;
  out.token_ids.reserve(token_ids.size() +
                        static_cast<size_t>(num_images * (tokens_per_image - 1)));
  for (int32_t id : token_ids) {
    if (id != image_token_id) {
      out.token_ids.push_back(id);
      continue;
    }
    out.image_start.push_back(static_cast<int64_t>(out.token_ids.size()));
    out.token_ids.insert(out.token_ids.end(), static_cast<size_t>(tokens_per_image), id);
  }
  return out;
}

}  // namespace ib
