// Incremental decoding of an HTTP/1.1 response body (after Beast has read the header): chunked
// transfer coding, a Content-Length, or "until the connection closes". The client's hot path
// reads raw socket bytes and hands them here instead of through Beast's parser, which costs
// several times more per small SSE chunk.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ib::detail {

class BodyDecoder {
 public:
  enum class Framing { kChunked, kLength, kUntilClose };
  BodyDecoder(Framing framing, uint64_t content_length)
      : framing_(framing), left_(content_length) {}

  // Decodes bytes, passing each piece of body data to on_data. Returns false on a framing error
  // (then error() says what). Bytes after the end of the body are ignored.
  template <class F>
  bool feed(std::string_view bytes, F&& on_data) {
    size_t i = 0;
    while (i < bytes.size() && !done_ && error_.empty()) {
      switch (framing_) {
        case Framing::kUntilClose:
          on_data(bytes.substr(i));
          return true;
        case Framing::kLength: {
          const size_t n = static_cast<size_t>(std::min<uint64_t>(left_, bytes.size() - i));
          on_data(bytes.substr(i, n));
          i += n;
          left_ -= n;
          done_ = left_ == 0;
          break;
        }
        case Framing::kChunked:
          i = chunked(bytes, i, on_data);
          break;
      }
    }
    return error_.empty();
  }
  // The body ended (chunked: the last chunk and trailers; length: all bytes). A close-delimited
  // body ends when the connection closes.
  bool done() const { return done_ || (framing_ == Framing::kLength && left_ == 0); }
  const std::string& error() const { return error_; }

 private:
  enum class State { kSize, kSizeLine, kData, kDataCr, kDataLf, kTrailer };

  template <class F>
  size_t chunked(std::string_view b, size_t i, F& on_data) {
    switch (state_) {
      case State::kSize: {
        const char c = b[i];
        const int digit = c >= '0' && c <= '9'   ? c - '0'
                          : c >= 'a' && c <= 'f' ? c - 'a' + 10
                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                 : -1;
        if (digit >= 0) {
          if (left_ > (uint64_t{1} << 40)) error_ = "chunk size too large";
          left_ = left_ * 16 + static_cast<uint64_t>(digit);
          ++digits_;
          return i + 1;
        }
        if (digits_ == 0) error_ = "bad chunk size";
        state_ = State::kSizeLine;  // extensions until LF
        return i;
      }
      case State::kSizeLine:
        if (b[i] == '\n') {
          state_ = left_ == 0 ? State::kTrailer : State::kData;
          line_len_ = 0;
        }
        return i + 1;
      case State::kData: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(left_, b.size() - i));
        on_data(b.substr(i, n));
        left_ -= n;
        if (left_ == 0) state_ = State::kDataCr;
        return i + n;
      }
      case State::kDataCr:
        if (b[i] != '\r') error_ = "chunk data not followed by CRLF";
        state_ = State::kDataLf;
        return i + 1;
      case State::kDataLf:
        if (b[i] != '\n') error_ = "chunk data not followed by CRLF";
        state_ = State::kSize;
        digits_ = 0;
        return i + 1;
      case State::kTrailer:  // lines until an empty one
        if (b[i] == '\n') {
          if (line_len_ == 0) done_ = true;
          line_len_ = 0;
        } else if (b[i] != '\r') {
          ++line_len_;
        }
        return i + 1;
    }
    return i + 1;
  }

  Framing framing_;
  uint64_t left_ = 0;  // bytes left in the body (length) or in the chunk
  State state_ = State::kSize;
  int digits_ = 0;
  size_t line_len_ = 0;
  bool done_ = false;
  std::string error_;
};

}  // namespace ib::detail
