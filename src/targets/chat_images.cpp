// The data: URLs of a workload's images and the chat content that carries them (chat_images.h).
#include "targets/chat_images.h"

#include <memory>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "core/clock.h"

#ifdef INFERBENCH_HAVE_VISION
#include "core/fs.h"
#include "vision/detail/image_encode.h"
#include "vision/image.h"
#endif

namespace ib {
namespace {

using nlohmann::json;

// Images with the same key are the same bytes: a file by its path, a random one by its size and
// seed.
std::string image_key(const RequestImage& image) {
  if (!image.path.empty()) return "file " + image.path;
  return fmt::format("random {}x{} seed {}", image.width_px, image.height_px, image.seed);
}

#ifdef INFERBENCH_HAVE_VISION

// vLLM's benchmark sends its random images as JPEG (lossy); PNG sends the very pixels the native
// target's vision tower sees, so an HTTP server and the engine in-process get the same input.
Result<std::string> data_url(const RequestImage& spec) {
  std::vector<uint8_t> png;
  std::string file;
  std::span<const uint8_t> bytes;
  std::string_view media_type = image_format_name(ImageFormat::kPng);
  if (spec.path.empty()) {
    IB_ASSIGN_OR_RETURN(
        png, detail::encode_png(random_rgb_image(spec.width_px, spec.height_px, spec.seed)));
    bytes = png;
  } else {
    IB_ASSIGN_OR_RETURN(file, read_file(spec.path));
    bytes = std::span(reinterpret_cast<const uint8_t*>(file.data()), file.size());
    const ImageFormat format = sniff_image_format(bytes);
    if (format != ImageFormat::kPng && format != ImageFormat::kJpeg) {
      return user_error(fmt::format(
          "image {} is {}; servers take PNG or JPEG: convert it or drop it from the dataset",
          spec.path,
          format == ImageFormat::kUnknown ? "neither PNG nor JPEG" : image_format_name(format)));
    }
    media_type = image_format_name(format);
  }
  return fmt::format("data:{};base64,{}", media_type, detail::encode_base64(bytes));
}

#endif

}  // namespace

Status ChatImageUrls::add(const std::vector<RequestSpec>& requests) {
  const int64_t start_ns = now_ns();
  for (const RequestSpec& r : requests) {
    for (const RequestImage& image : r.images) {
      std::string key = image_key(image);
      if (parts_.contains(key)) continue;
#ifdef INFERBENCH_HAVE_VISION
      auto url = data_url(image);
      if (!url.ok()) {
        return Error{url.error().kind, fmt::format("request {}: {}", r.id, url.error().message)};
      }
      url_bytes_ += static_cast<int64_t>(url->size());
      parts_.emplace(std::move(key),
                     json{{"type", "image_url"}, {"image_url", {{"url", std::move(*url)}}}}.dump());
#else
      return user_error(fmt::format(
          "request {} holds images and this inferbench was built without image support; rebuild "
          "with -DINFERBENCH_VISION=ON (libpng and libjpeg-turbo: scripts/install-deps)",
          r.id));
#endif
    }
  }
  build_ns_ += now_ns() - start_ns;
  return Ok{};
}

const std::string* ChatImageUrls::part(const RequestImage& image) const {
  const auto it = parts_.find(image_key(image));
  return it == parts_.end() ? nullptr : &it->second;
}

json ChatImageUrls::describe() const {
  return json{{"distinct_images", parts_.size()},
              {"data_url_bytes", url_bytes_},
              {"build_s", ns_to_s(build_ns_)},
              {"encoding", "files: their own bytes; random-mm: PNG"},
              {"content_order", "text part, then one image_url part per image (vLLM's)"}};
}

// vLLM's `vllm bench serve` (openai-chat) puts a request's multimodal items after its text by
// default: one user message whose content list is the text part followed by the items in the
// dataset's order (vllm/benchmarks/lib/endpoint_request_func.py, _get_chat_content with
// mm_position "last"). The same order here, so a server renders the same prompt for both tools.
Result<std::string> chat_messages_with_images(const std::string& text, const RequestSpec& request,
                                              const ChatImageUrls& urls) {
  const std::string text_part =
      json{{"type", "text"}, {"text", text}}.dump(-1, ' ', false, json::error_handler_t::replace);
  std::vector<const std::string*> parts;
  size_t size = text_part.size() + 64;
  for (const RequestImage& image : request.images) {
    const std::string* part = urls.part(image);
    if (part == nullptr) {
      return runtime_error(fmt::format(
          "request {}: its image ({}) was not prepared before the run (ChatImageUrls::add)",
          request.id, image_key(image)));
    }
    parts.push_back(part);
    size += part->size() + 1;
  }
  std::string out;
  out.reserve(size);
  out += R"([{"role":"user","content":[)";
  out += text_part;
  for (const std::string* part : parts) {
    out += ',';
    out += *part;
  }
  out += "]}]";
  return out;
}

std::function<Status(std::vector<RequestSpec>&)> http_image_preparation(
    OpenAITargetOptions& options) {
  if (!options.chat) {
    return [](std::vector<RequestSpec>& requests) -> Status {
      for (const RequestSpec& r : requests) {
        if (r.images.empty()) continue;
        return user_error(fmt::format(
            "request {} holds {} image(s) and --backend openai sends completions, whose prompt is "
            "text only; use --backend openai-chat (images go as image_url parts of the chat "
            "message)",
            r.id, r.images.size()));
      }
      return Ok{};
    };
  }
  auto urls = std::make_shared<ChatImageUrls>();
  options.image_urls = urls;
  return [urls](std::vector<RequestSpec>& requests) { return urls->add(requests); };
}

}  // namespace ib
