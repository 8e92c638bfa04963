// Qwen2-VL image preprocessing: smart_resize, resize, normalise, patchify.
#include "vision/qwen2vl_preprocess.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "vision/detail/bicubic_resize.h"

namespace ib {

Result<std::array<int64_t, 2>> qwen2vl_smart_resize(int64_t height, int64_t width, int64_t factor,
                                                    int64_t min_pixels, int64_t max_pixels) {
  if (height < factor || width < factor) {
    return user_error("the image is " + std::to_string(width) + " x " + std::to_string(height) +
                      " px; Qwen2-VL needs both sides at least " + std::to_string(factor) + " px");
  }
  const auto h = static_cast<double>(height), w = static_cast<double>(width);
  const auto f = static_cast<double>(factor);
  if (std::max(h, w) / std::min(h, w) > 200) {
    return user_error("the image's aspect ratio " +
                      std::to_string(std::max(h, w) / std::min(h, w)) +
                      " is over 200, which Qwen2-VL's processor refuses");
  }
  // round(x / f) * f, half to even as Python's round.
  auto round_by = [f](double x) {
    return static_cast<int64_t>(std::nearbyint(x / f)) * static_cast<int64_t>(f);
  };
  auto floor_by = [f](double x) {
    return static_cast<int64_t>(std::floor(x / f)) * static_cast<int64_t>(f);
  };
  auto ceil_by = [f](double x) {
    return static_cast<int64_t>(std::ceil(x / f)) * static_cast<int64_t>(f);
  };
  int64_t h_bar = round_by(h), w_bar = round_by(w);
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(h * w / static_cast<double>(max_pixels));
    h_bar = std::max(factor, floor_by(h / beta));
    w_bar = std::max(factor, floor_by(w / beta));
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
    h_bar = ceil_by(h * beta);
    w_bar = ceil_by(w * beta);
  }
  return std::array<int64_t, 2>{h_bar, w_bar};
}

Qwen2VlPixels qwen2vl_patchify(const std::vector<float>& planes, int64_t height, int64_t width,
                               const Qwen2VlPreprocessConfig& config) {
  const int64_t p = config.patch_size_px, m = config.merge_size,
                frames = config.temporal_patch_size;
  IB_ASSERT(height % (p * m) == 0 && width % (p * m) == 0 &&
                static_cast<int64_t>(planes.size()) == 3 * height * width,
            "qwen2vl_patchify: planes (3, H, W), H and W multiples of patch x merge");
  Qwen2VlPixels out;
  const int64_t gh = height / p, gw = width / p;
  out.grid_thw = {1, gh, gw};
  const int64_t cols = 3 * frames * p * p;
  out.values.resize(static_cast<size_t>(gh * gw * cols));
  int64_t row = 0;
  // Rows in merge-window order: (h / m, w / m, m, m); columns (channel, frame, y, x).
  for (int64_t bh = 0; bh < gh / m; ++bh) {
    for (int64_t bw = 0; bw < gw / m; ++bw) {
      for (int64_t mh = 0; mh < m; ++mh) {
        for (int64_t mw = 0; mw < m; ++mw, ++row) {
          const int64_t y0 = (bh * m + mh) * p, x0 = (bw * m + mw) * p;
          float* dst = out.values.data() + row * cols;
          for (int64_t c = 0; c < 3; ++c) {
            for (int64_t t = 0; t < frames; ++t) {  // the one image, in every frame
              for (int64_t y = 0; y < p; ++y) {
                const float* src = planes.data() + (c * height + y0 + y) * width + x0;
                std::copy(src, src + p, dst + ((c * frames + t) * p + y) * p);
              }
            }
          }
        }
      }
    }
  }
  return out;
}

Result<Qwen2VlPixels> preprocess_qwen2vl(const Image& image, const Qwen2VlPreprocessConfig& config,
                                         ImageBackend backend) {
  Image work = image;
  if (config.do_resize) {
    IB_ASSIGN_OR_RETURN(const auto size,
                        qwen2vl_smart_resize(image.height_px, image.width_px, config.factor_px(),
                                             config.min_pixels, config.max_pixels));
    const auto rule = backend == ImageBackend::kPil ? detail::FixedPointRule::kPil
                                                    : detail::FixedPointRule::kTorchvision;
    work = detail::resize_bicubic(work, size[1], size[0], rule);
  } else if (image.height_px % config.factor_px() != 0 ||
             image.width_px % config.factor_px() != 0) {
    return user_error("do_resize is false and the image is " + std::to_string(image.width_px) +
                      " x " + std::to_string(image.height_px) + " px, not multiples of " +
                      std::to_string(config.factor_px()));
  }
  const std::vector<float> planes = preprocess_clip(work, config.normalize, backend);
  return qwen2vl_patchify(planes, work.height_px, work.width_px, config);
}

}  // namespace ib
