// data: and file:// image URLs, chat content parts and the per-prompt image limit.
#include "vision/image_input.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "vision/detail/base64.h"

namespace ib {

namespace {

constexpr std::string_view kDataPrefix = "data:";
constexpr std::string_view kFilePrefix = "file://";

Error over_byte_cap(int64_t bytes, const ImageInputPolicy& policy) {
  return user_error("the image is " + std::to_string(bytes) + " bytes, over the cap of " +
                    std::to_string(policy.max_encoded_bytes) + " bytes; send a smaller image");
}

Result<Image> load_data_url(std::string_view url, const ImageInputPolicy& policy) {
  const std::string_view rest = url.substr(kDataPrefix.size());
  const size_t comma = rest.find(',');
  if (comma == std::string_view::npos) {
    return user_error("the data: URL has no ',' before its data; send data:image/png;base64,...");
  }
  const std::string_view meta = rest.substr(0, comma);
  const std::string_view payload = rest.substr(comma + 1);
  constexpr std::string_view kBase64 = ";base64";
  if (meta.size() < kBase64.size() || meta.substr(meta.size() - kBase64.size()) != kBase64) {
    return user_error("the data: URL is not base64 (\"" + std::string(meta) +
                      "\"); send data:image/png;base64,...");
  }
  const std::string_view media_type = meta.substr(0, meta.find(';'));
  if (media_type.substr(0, 6) != "image/") {
    return user_error("the data: URL's media type \"" + std::string(media_type) +
                      "\" is not an image; send image/png or image/jpeg");
  }
  if (static_cast<int64_t>(payload.size() / 4 * 3) > policy.max_encoded_bytes) {
    return over_byte_cap(static_cast<int64_t>(payload.size() / 4 * 3), policy);
  }
  auto bytes = detail::decode_base64(payload);
  if (!bytes.ok()) return bytes.error();
  return decode_image(*bytes, policy.limits);
}

Result<Image> load_file_url(std::string_view url, const ImageInputPolicy& policy) {
  namespace fs = std::filesystem;
  if (policy.allowed_local_media_path.empty()) {
    return user_error(
        "file:// URLs are refused unless the server allows a directory "
        "(--allowed-local-media-path DIR); send a data: URL instead");
  }
  std::error_code ec;
  const fs::path allowed = fs::canonical(policy.allowed_local_media_path, ec);
  if (ec) {
    return user_error("--allowed-local-media-path " + policy.allowed_local_media_path +
                      " is not a directory here: " + ec.message());
  }
  const fs::path path = fs::canonical(fs::path(url.substr(kFilePrefix.size())), ec);
  if (ec) return user_error("cannot open " + std::string(url) + ": " + ec.message());
  const auto [end, unused] =
      std::mismatch(allowed.begin(), allowed.end(), path.begin(), path.end());
  if (end != allowed.end()) {
    return user_error(path.string() + " is outside --allowed-local-media-path " + allowed.string());
  }
  const auto size = fs::file_size(path, ec);
  if (ec) return user_error("cannot read " + path.string() + ": " + ec.message());
  if (static_cast<int64_t>(size) > policy.max_encoded_bytes) {
    return over_byte_cap(static_cast<int64_t>(size), policy);
  }
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return user_error("cannot read " + path.string());
  return decode_image(bytes, policy.limits);
}

Error part_error(const std::string& where, std::string_view kind, const std::string& message) {
  return user_error(where + " (" + std::string(kind) + "): " + message);
}

}  // namespace

Result<Image> load_image_url(std::string_view url, const ImageInputPolicy& policy) {
  if (url.substr(0, kDataPrefix.size()) == kDataPrefix) return load_data_url(url, policy);
  if (url.substr(0, kFilePrefix.size()) == kFilePrefix) return load_file_url(url, policy);
  const std::string shown(url.substr(0, std::min<size_t>(url.size(), 40)));
  return user_error("only data: URLs are accepted (\"" + shown + (url.size() > 40 ? "..." : "") +
                    "\"; nothing is fetched); embed the image as data:image/png;base64,...");
}

Result<std::vector<ContentPart>> PromptImageReader::read_content(const nlohmann::json& content,
                                                                 std::string_view where) {
  std::vector<ContentPart> parts;
  if (content.is_string()) {
    parts.push_back(ContentPart{ContentPart::Kind::kText, content.get<std::string>(), {}});
    return parts;
  }
  if (!content.is_array()) {
    return user_error(std::string(where) + " must be a string or an array of content parts");
  }
  for (size_t i = 0; i < content.size(); ++i) {
    auto part = read_part(content[i], std::string(where) + "[" + std::to_string(i) + "]");
    if (!part.ok()) return part.error();
    parts.push_back(std::move(*part));
  }
  return parts;
}

Result<ContentPart> PromptImageReader::read_part(const nlohmann::json& part,
                                                 const std::string& where) {
  if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
    return user_error(where + " must be an object with a string \"type\"");
  }
  const std::string& type = part["type"].get_ref<const std::string&>();
  if (type == "text") {
    if (!part.contains("text") || !part["text"].is_string()) {
      return part_error(where, type, "\"text\" must be a string");
    }
    return ContentPart{ContentPart::Kind::kText, part["text"].get<std::string>(), {}};
  }
  if (type != "image_url") {
    return part_error(where, type,
                      "this content part type is not supported; send \"text\" or "
                      "\"image_url\" parts");
  }
  const auto it = part.find("image_url");
  if (it == part.end() || !it->is_object() || !it->contains("url") || !(*it)["url"].is_string()) {
    return part_error(where, type, "needs \"image_url\": {\"url\": \"data:image/png;base64,...\"}");
  }
  auto image = read_image_url((*it)["url"].get_ref<const std::string&>(), where);
  if (!image.ok()) return image.error();
  return ContentPart{ContentPart::Kind::kImage, {}, std::move(*image)};
}

Result<Image> PromptImageReader::read_image_url(std::string_view url, const std::string& where) {
  constexpr std::string_view kType = "image_url";
  if (images_ >= policy_.max_images_per_prompt) {
    return part_error(where, kType,
                      "the prompt holds more than " +
                          std::to_string(policy_.max_images_per_prompt) +
                          " image(s), the limit; send fewer or raise --limit-mm-per-prompt "
                          "'{\"image\": N}'");
  }
  auto image = load_image_url(url, policy_);
  if (!image.ok()) return part_error(where, kType, image.error().message);
  ++images_;
  return image;
}

}  // namespace ib
