// Fuzzes the image input: bytes starting with '[' or '{' are a message's content (parts, or one
// part) through PromptImageReader; anything else is image bytes through decode_image. Never a
// crash; an accepted image is within the caps and holds width * height RGB pixels.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>

#include "core/assert.h"
#include "vision/image.h"
#include "vision/image_input.h"

namespace {

constexpr int64_t kMaxPixels = 1 << 20;

void check_image(const ib::Image& image) {
  IB_ASSERT(image.width_px > 0 && image.height_px > 0, "an accepted image without pixels");
  IB_ASSERT(image.width_px * image.height_px <= kMaxPixels, "an image over the pixel cap");
  IB_ASSERT(image.rgb.size() == static_cast<size_t>(image.width_px * image.height_px * 3),
            "pixels do not match the size");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  if (size > 0 && (data[0] == '[' || data[0] == '{')) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded()) return 0;
    if (json.is_object()) json = nlohmann::json::array({json});
    ib::ImageInputPolicy policy;
    policy.max_images_per_prompt = 2;
    policy.max_encoded_bytes = 1 << 20;
    policy.limits.max_pixels = kMaxPixels;
    ib::PromptImageReader reader(policy);
    auto parts = reader.read_content(json, "messages[0].content");
    if (!parts.ok()) {
      IB_ASSERT(parts.error().message.find("messages[0].content") == 0,
                "an error without its part");
      return 0;
    }
    IB_ASSERT(reader.images() <= 2, "the image limit was passed");
    for (const auto& part : *parts) {
      if (part.kind == ib::ContentPart::Kind::kImage) check_image(part.image);
    }
    return 0;
  }
  auto image = ib::decode_image(bytes, ib::ImageLimits{kMaxPixels});
  if (!image.ok()) {
    IB_ASSERT(!image.error().message.empty(), "an error without a message");
    return 0;
  }
  check_image(*image);
  return 0;
}
