// Images of chat requests (--backend openai-chat): each image of the workload as the data: URL of
// an OpenAI image_url content part, built once before the run (not on the timed path) and spliced
// into each request's body as it is sent. --backend openai (completions) takes text only: a
// workload with images is refused there before any request goes out.
//
// Threading: add() runs before the target is set up; part() is then read from submit()'s thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"
#include "targets/openai_target.h"
#include "targets/target.h"

namespace ib {

class ChatImageUrls {
 public:
  // Builds the image_url part of every image of requests not built yet: a file's own bytes with
  // the MIME type its first bytes announce (PNG or JPEG; others are refused), a random-mm image's
  // RGB pixels (the native target's, from its seed) as PNG. User errors name the request and
  // the file.
  Status add(const std::vector<RequestSpec>& requests);
  // The part (JSON text) of an image add() has built; nullptr otherwise.
  const std::string* part(const RequestImage& image) const;
  // For result.json: the distinct images, their data: URLs' bytes and the time add() took.
  nlohmann::json describe() const;

 private:
  std::unordered_map<std::string, std::string> parts_;  // image key -> image_url part
  int64_t url_bytes_ = 0;
  int64_t build_ns_ = 0;
};

// The "messages" (JSON text) of a chat request with images: one user message whose content is
// the text part, then one image_url part per image in the request's order.
Result<std::string> chat_messages_with_images(const std::string& text, const RequestSpec& request,
                                              const ChatImageUrls& urls);

// run's preparation of a workload's images for an HTTP target (RunConfig::prepare_images): chat
// builds their parts into options.image_urls; completions refuses them, naming --backend
// openai-chat.
std::function<Status(std::vector<RequestSpec>&)> http_image_preparation(
    OpenAITargetOptions& options);

}  // namespace ib
