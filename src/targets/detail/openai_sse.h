// Client side of an OpenAI-compatible stream: an incremental Server-Sent-Events parser (bytes may
// split anywhere) and the reading of each event's JSON into what the benchmark needs: content
// or not, text length, usage, finish reason, error. The chunk list of a request is turned into
// per-chunk token counts once its usage is known (apportion_tokens).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ib::detail {

// Splits a byte stream into SSE events and hands each event's data (its "data:" lines joined by
// "\n") to on_data. Comment lines (":") and other fields are skipped; "\r\n" and "\n" both end
// lines.
class SseParser {
 public:
  template <class F>
  void feed(std::string_view bytes, F&& on_data) {
    size_t start = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
      if (bytes[i] != '\n') continue;
      line_.append(bytes.substr(start, i - start));
      start = i + 1;
      if (!line_.empty() && line_.back() == '\r') line_.pop_back();
      if (line_.empty()) {
        if (has_data_) on_data(std::string_view(data_));
        data_.clear();
        has_data_ = false;
      } else if (line_.compare(0, 5, "data:") == 0) {
        std::string_view value = std::string_view(line_).substr(5);
        if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
        if (has_data_) data_.push_back('\n');
        data_.append(value);
        has_data_ = true;
      }
      line_.clear();
    }
    line_.append(bytes.substr(start));
  }
  // Bytes of an unfinished line or event are pending.
  bool idle() const { return line_.empty() && !has_data_; }

 private:
  std::string line_;
  std::string data_;
  bool has_data_ = false;
};

enum class ChunkKind { kContent, kEmpty, kUsageOnly, kDone, kError, kUnreadable };

struct StreamChunk {
  ChunkKind kind = ChunkKind::kUnreadable;
  size_t text_bytes = 0;  // content text length (completions "text", chat "delta.content")
  std::optional<int> prompt_tokens;
  std::optional<int> completion_tokens;  // cumulative, where the server sends usage
  std::string finish_reason;             // empty while none
  std::string error;                     // kError: the server's message
  std::string text;                      // only when keep_text
};

// Reads one event's data. Role-only and empty-text chunks are kEmpty; a usage chunk without
// choices is kUsageOnly; "[DONE]" is kDone.
StreamChunk read_chunk(std::string_view data, bool keep_text);

// Tokens per content chunk: exact where cumulative usage came with the chunks (usage_deltas,
// -1 where unknown); otherwise total_tokens spread over the chunks in proportion to their text
// length, each chunk getting at least one while there are enough (largest remainders first).
std::vector<int> apportion_tokens(const std::vector<size_t>& text_bytes,
                                  const std::vector<int>& usage_deltas, int total_tokens);

}  // namespace ib::detail
