#include "model/tokenizer.h"

namespace ib {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

class ByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "byte"; }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (const char ch : text) {
      ids.push_back(static_cast<int32_t>(static_cast<unsigned char>(ch)) + kByteTokenOffset);
    }
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    text.reserve(ids.size());
    for (const int32_t id : ids) {
      if (id >= kByteTokenOffset && id < kByteTokenOffset + 256) {
        text.push_back(static_cast<char>(static_cast<unsigned char>(id - kByteTokenOffset)));
      } else if (id < 0 || id >= kByteTokenOffset) {
        text += kReplacementChar;
      }
    }
    return text;
  }
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() {
  return std::make_unique<ByteTokenizer>();
}

}  // namespace ib
