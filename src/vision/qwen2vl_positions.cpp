// Qwen2-VL's get_rope_index for one sequence of text and images.
#include "vision/qwen2vl_positions.h"

#include <algorithm>
#include <string>

namespace ib {

Result<std::vector<int32_t>> qwen2vl_mrope_positions(
    std::span<const int32_t> ids, const Qwen2VlConfig& config,
    std::span<const std::array<int64_t, 3>> grid_thw) {
  const auto len = static_cast<int64_t>(ids.size());
  const auto image = static_cast<int32_t>(config.image_token_id);
  int64_t images = 0;
  for (int64_t i = 0; i + 1 < len; ++i) {
    if (ids[static_cast<size_t>(i)] != config.vision_start_token_id) continue;
    const int32_t next = ids[static_cast<size_t>(i + 1)];
    if (next == config.video_token_id) {
      return user_error(
          "the prompt holds a video (vision_start then the video token); "
          "inferbench's Qwen2-VL takes images only");
    }
    images += next == image;
  }
  if (images != static_cast<int64_t>(grid_thw.size())) {
    return user_error("the prompt holds " + std::to_string(images) +
                      " image(s) (<|vision_start|> then <|image_pad|>) for " +
                      std::to_string(grid_thw.size()) + " image grid(s)");
  }
  std::vector<int32_t> pos(static_cast<size_t>(3 * len));
  auto set = [&](int64_t at, int64_t t, int64_t h, int64_t w) {
    pos[static_cast<size_t>(at)] = static_cast<int32_t>(t);
    pos[static_cast<size_t>(len + at)] = static_cast<int32_t>(h);
    pos[static_cast<size_t>(2 * len + at)] = static_cast<int32_t>(w);
  };
  int64_t st = 0;    // the next token to place
  int64_t next = 0;  // the previous chunk's maximum + 1
  const int64_t m = config.vision.spatial_merge_size;
  for (const auto& grid : grid_thw) {
    const auto found = std::find(ids.begin() + st, ids.end(), image);
    const int64_t ed = found - ids.begin();
    const int64_t gt = grid[0], gh = grid[1] / m, gw = grid[2] / m;
    if (ed + gt * gh * gw > len) {
      return user_error("an image of " + std::to_string(gt * gh * gw) +
                        " visual tokens does not fit the prompt at position " + std::to_string(ed) +
                        "; expand each <|image_pad|> to its tokens");
    }
    for (int64_t i = st; i < ed; ++i) set(i, next + i - st, next + i - st, next + i - st);
    const int64_t base = next + (ed - st);
    int64_t at = ed, top = base;
    for (int64_t t = 0; t < gt; ++t) {
      for (int64_t h = 0; h < gh; ++h) {
        for (int64_t w = 0; w < gw; ++w, ++at) {
          set(at, base + t, base + h, base + w);
          top = std::max({top, base + t, base + h, base + w});
        }
      }
    }
    next = top + 1;
    st = ed + gt * gh * gw;
  }
  for (int64_t i = st; i < len; ++i) set(i, next + i - st, next + i - st, next + i - st);
  return pos;
}

}  // namespace ib
