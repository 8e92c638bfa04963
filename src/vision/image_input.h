// Images in OpenAI chat requests, the vision subsystem's front door for request input:
// `image_url` content parts holding data: URLs (base64 PNG or JPEG) or, where a directory is
// allowed, file:// URLs under it; decoded, capped in bytes and pixels, and counted against the
// prompt's image limit (vLLM's --limit-mm-per-prompt). Every error is a user error naming the
// part ("messages[0].content[2] (image_url): ...").
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "vision/image.h"

namespace ib {

struct ImageInputPolicy {
  int max_images_per_prompt = 1;  // vLLM's --limit-mm-per-prompt (workload/workload.h parses it)
  int64_t max_encoded_bytes = 20LL << 20;  // one image's file bytes, checked before decoding
  ImageLimits limits;                      // pixels, checked from the header
  // vLLM's --allowed-local-media-path: file:// URLs must resolve under this directory; empty:
  // file:// URLs are refused.
  std::string allowed_local_media_path;
};

// One part of a message's content, in order.
struct ContentPart {
  enum class Kind { kText, kImage };
  Kind kind = Kind::kText;
  std::string text;  // kText
  Image image;       // kImage
};

// Loads one image_url's URL: "data:image/png;base64,..." (or image/jpeg), or "file:///abs/path"
// when the policy allows a directory; any other URL is refused (nothing is fetched).
Result<Image> load_image_url(std::string_view url, const ImageInputPolicy& policy);

// Reads the content of the messages of one prompt, counting its images across messages.
// Not thread-safe; one reader per request.
class PromptImageReader {
 public:
  explicit PromptImageReader(ImageInputPolicy policy) : policy_(std::move(policy)) {}

  // content: a string (one text part) or an array of {"type": "text", "text": ...} and
  // {"type": "image_url", "image_url": {"url": ...}} parts. where names it in errors
  // ("messages[1].content").
  Result<std::vector<ContentPart>> read_content(const nlohmann::json& content,
                                                std::string_view where);
  // One image_url part's URL, counted against the limit; where names the part in errors.
  Result<Image> read_image_url(std::string_view url, const std::string& where);
  int images() const { return images_; }

 private:
  Result<ContentPart> read_part(const nlohmann::json& part, const std::string& where);

  ImageInputPolicy policy_;
  int images_ = 0;
};

}  // namespace ib
