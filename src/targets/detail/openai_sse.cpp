// Reading streamed OpenAI chunks (openai_sse.h).
#include "targets/detail/openai_sse.h"

#include <algorithm>
#include <numeric>

#include <nlohmann/json.hpp>

namespace ib::detail {
namespace {

using nlohmann::json;

std::optional<int> int_field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int>();
}

}  // namespace

StreamChunk read_chunk(std::string_view data, bool keep_text) {
  StreamChunk c;
  if (data == "[DONE]") {
    c.kind = ChunkKind::kDone;
    return c;
  }
  const json doc = json::parse(data.begin(), data.end(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return c;  // kUnreadable
  if (auto err = doc.find("error"); err != doc.end() && !err->is_null()) {
    c.kind = ChunkKind::kError;
    if (err->is_object() && err->contains("message") && (*err)["message"].is_string()) {
      c.error = (*err)["message"].get<std::string>();
    } else {
      c.error = err->dump();
    }
    return c;
  }
  if (auto usage = doc.find("usage"); usage != doc.end() && usage->is_object()) {
    c.prompt_tokens = int_field(*usage, "prompt_tokens");
    c.completion_tokens = int_field(*usage, "completion_tokens");
  }
  auto choices = doc.find("choices");
  if (choices == doc.end() || !choices->is_array() || choices->empty()) {
    c.kind = ChunkKind::kUsageOnly;
    return c;
  }
  const json& choice = (*choices)[0];
  if (!choice.is_object()) return c;
  if (auto fr = choice.find("finish_reason"); fr != choice.end() && fr->is_string()) {
    c.finish_reason = fr->get<std::string>();
  }
  const json* text = nullptr;
  if (auto t = choice.find("text"); t != choice.end()) {
    text = &*t;
  } else if (auto d = choice.find("delta"); d != choice.end() && d->is_object()) {
    if (auto t2 = d->find("content"); t2 != d->end()) text = &*t2;
  }
  if (text != nullptr && text->is_string()) {
    const auto& s = text->get_ref<const std::string&>();
    c.text_bytes = s.size();
    if (keep_text) c.text = s;
  }
  c.kind = c.text_bytes > 0 ? ChunkKind::kContent : ChunkKind::kEmpty;
  return c;
}

std::vector<int> apportion_tokens(const std::vector<size_t>& text_bytes,
                                  const std::vector<int>& usage_deltas, int total_tokens) {
  const size_t n = text_bytes.size();
  if (n == 0) return {};
  const bool exact =
      usage_deltas.size() == n &&
      std::all_of(usage_deltas.begin(), usage_deltas.end(), [](int d) { return d >= 0; }) &&
      std::accumulate(usage_deltas.begin(), usage_deltas.end(), 0) == total_tokens;
  if (exact) return usage_deltas;
  std::vector<int> out(n, 1);
  if (total_tokens <= static_cast<int>(n)) return out;
  const size_t bytes = std::accumulate(text_bytes.begin(), text_bytes.end(), size_t{0});
  std::vector<std::pair<double, size_t>> remainders;  // (fractional part, chunk)
  int64_t sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const double share = bytes > 0
                             ? static_cast<double>(total_tokens) *
                                   static_cast<double>(text_bytes[i]) / static_cast<double>(bytes)
                             : static_cast<double>(total_tokens) / static_cast<double>(n);
    const auto whole = static_cast<int>(share);
    out[i] = std::max(1, whole);
    sum += out[i];
    remainders.emplace_back(share - static_cast<double>(whole), i);
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; sum < total_tokens; ++k, ++sum) ++out[remainders[k % n].second];
  while (sum > total_tokens) {  // the floors of 1 overshot: take from the largest chunks
    --*std::max_element(out.begin(), out.end());
    --sum;
  }
  return out;
}

}  // namespace ib::detail
