// --dataset-name random-mm: random token prompts with random images of drawn counts and sizes
// (vLLM's RandomMultiModalDataset flags), and the parsers of its bucket config and of vLLM's
// per-prompt image limits.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <regex>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "workload/workload.h"

namespace ib {
namespace {

constexpr std::string_view kBucketUsage =
    "; write it as vLLM does: '{(256, 256, 1): 0.5, (720, 1280, 1): 0.5}' (height, width, 1 "
    "frame: an image) to probability";
constexpr int64_t kMaxSidePx = 16384;
constexpr int kMaxImagesPerPrompt = 1000;

Status validate_random_mm(const RandomMmOptions& o) {
  if (o.base_items_per_request < 0) {
    return user_error(fmt::format("--random-mm-base-items-per-request must be >= 0 (got {})",
                                  o.base_items_per_request));
  }
  if (!(o.num_mm_items_range_ratio >= 0 && o.num_mm_items_range_ratio <= 1)) {
    return user_error(fmt::format("--random-mm-num-mm-items-range-ratio must be in [0, 1] (got {})",
                                  o.num_mm_items_range_ratio));
  }
  const auto lo =
      static_cast<int>(std::floor(o.base_items_per_request * (1 - o.num_mm_items_range_ratio)));
  if (lo > o.limit_images) {
    return user_error(fmt::format(
        "--random-mm-base-items-per-request {} with range ratio {} asks for at least {} images, "
        "over --random-mm-limit-mm-per-prompt's {}; lower the base or raise the limit",
        o.base_items_per_request, o.num_mm_items_range_ratio, lo, o.limit_images));
  }
  if (o.buckets.empty()) {
    return user_error("--random-mm-bucket-config has no bucket with a probability above 0");
  }
  return Ok{};
}

// The index of the bucket a uniform u in [0, 1) falls in (probabilities summing to 1).
size_t draw_bucket(const std::vector<ImageBucket>& buckets, double u) {
  double cumulative = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    cumulative += buckets[i].probability;
    if (u < cumulative) return i;
  }
  return buckets.size() - 1;
}

}  // namespace

Result<int> parse_limit_mm_per_prompt(std::string_view text, std::string_view flag) {
  const std::string usage = fmt::format("; use {} '{{\"image\": N}}' (or image=N)", flag);
  nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    const size_t eq = text.find('=');
    if (eq == std::string_view::npos) {
      return user_error(std::string(flag) + " \"" + std::string(text) + "\" is not JSON" + usage);
    }
    const std::string value(text.substr(eq + 1));
    char* end = nullptr;
    const long n = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0') {
      return user_error(std::string(flag) + " \"" + std::string(text) + "\": \"" + value +
                        "\" is not an integer" + usage);
    }
    parsed = nlohmann::json::object({{std::string(text.substr(0, eq)), n}});
  }
  if (!parsed.is_object()) return user_error(std::string(flag) + " must be an object" + usage);
  int images = 1;
  for (const auto& [modality, value] : parsed.items()) {
    if (modality != "image" && value == 0) continue;  // vLLM's '{"image": N, "video": 0}'
    if (modality != "image") {
      return user_error(std::string(flag) + ": modality \"" + modality +
                        "\" is not supported (images only)" + usage);
    }
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() > kMaxImagesPerPrompt) {
      return user_error(std::string(flag) + ": \"image\" must be an integer in 0.." +
                        std::to_string(kMaxImagesPerPrompt) + usage);
    }
    images = value.get<int>();
  }
  return images;
}

Result<std::vector<ImageBucket>> parse_mm_bucket_config(std::string_view text) {
  static const std::regex kEntry(
      R"(^\s*,?\s*\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)\s*:\s*([0-9.eE+-]+)\s*)");
  std::string body(text);
  const size_t open = body.find_first_not_of(" \t");
  const size_t close = body.find_last_not_of(" \t");
  if (open == std::string::npos || body[open] != '{' || body[close] != '}') {
    return user_error(fmt::format("--random-mm-bucket-config \"{}\" is not a {{...}} mapping{}",
                                  text, kBucketUsage));
  }
  body = body.substr(open + 1, close - open - 1);
  std::vector<ImageBucket> buckets;
  double total = 0;
  std::smatch m;
  while (body.find_first_not_of(" \t,") != std::string::npos) {
    if (!std::regex_search(body, m, kEntry)) {
      return user_error(
          fmt::format("--random-mm-bucket-config: cannot read \"{}\"{}", body, kBucketUsage));
    }
    const int64_t h = std::stoll(m[1]), w = std::stoll(m[2]), frames = std::stoll(m[3]);
    char* end = nullptr;
    const std::string p_text = m[4];
    const double p = std::strtod(p_text.c_str(), &end);
    if (*end != '\0' || !(p >= 0) || !std::isfinite(p)) {
      return user_error(fmt::format(
          "--random-mm-bucket-config: probability \"{}\" is not a number >= 0", p_text));
    }
    if (frames != 1) {
      return user_error(fmt::format(
          "--random-mm-bucket-config: ({}, {}, {}) is a video ({} frames); only images (1 "
          "frame) are supported",
          h, w, frames, frames));
    }
    if (h < 1 || w < 1 || h > kMaxSidePx || w > kMaxSidePx) {
      return user_error(fmt::format(
          "--random-mm-bucket-config: ({}, {}, 1): sides must be in 1..{} px", h, w, kMaxSidePx));
    }
    if (p > 0) buckets.push_back({h, w, p});
    total += p;
    body = m.suffix().str();
  }
  if (total <= 0) {
    return user_error(fmt::format(
        "--random-mm-bucket-config: no bucket has a probability above 0{}", kBucketUsage));
  }
  for (ImageBucket& b : buckets) b.probability /= total;
  return buckets;
}

Result<std::vector<RequestSpec>> make_random_mm_requests(const WorkloadOptions& options) {
  const RandomMmOptions& mm = options.random_mm;
  IB_TRY(validate_random_mm(mm));
  IB_ASSIGN_OR_RETURN(std::vector<RequestSpec> out, make_random_requests(options));
  // Their own streams: the text of a seed is random's, whatever the image flags.
  Rng count_rng(options.seed * 4 + 5);
  Rng size_rng(options.seed * 4 + 6);
  const double base = mm.base_items_per_request;
  const auto lo = static_cast<int64_t>(std::floor(base * (1 - mm.num_mm_items_range_ratio)));
  const int64_t hi = std::min<int64_t>(
      static_cast<int64_t>(std::ceil(base * (1 + mm.num_mm_items_range_ratio))), mm.limit_images);
  for (RequestSpec& r : out) {
    const int64_t n = count_rng.uniform_int(lo, hi);
    for (int64_t k = 0; k < n; ++k) {
      const ImageBucket& b = mm.buckets[draw_bucket(mm.buckets, size_rng.uniform())];
      r.images.push_back(RequestImage{"", b.width_px, b.height_px,
                                      counter_hash(options.seed, r.id, static_cast<uint64_t>(k))});
    }
  }
  return out;
}

}  // namespace ib
