// Strict base64 decoding.
#include "vision/detail/base64.h"

#include <array>
#include <string>

namespace ib::detail {

namespace {

constexpr int kInvalid = -1;
constexpr int kPad = -2;

constexpr std::array<int, 256> make_table() {
  std::array<int, 256> table{};
  for (int& v : table) v = kInvalid;
  constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (size_t i = 0; i < kAlphabet.size(); ++i) {
    table[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int>(i);
  }
  table['='] = kPad;
  return table;
}

constexpr std::array<int, 256> kTable = make_table();

Error bad_base64(const std::string& what) {
  return user_error("the base64 data does not decode: " + what +
                    "; send standard base64 (A-Z a-z 0-9 + /, '=' padding)");
}

}  // namespace

Result<std::vector<uint8_t>> decode_base64(std::string_view text) {
  if (text.size() % 4 != 0) {
    return bad_base64("its length " + std::to_string(text.size()) +
                      " is not a multiple of 4 (missing padding?)");
  }
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    std::array<int, 4> v{};
    int pads = 0;
    for (size_t j = 0; j < 4; ++j) {
      v[j] = kTable[static_cast<uint8_t>(text[i + j])];
      const bool last_group = i + 4 == text.size();
      if (v[j] == kInvalid || (v[j] == kPad && (!last_group || j < 2)) ||
          (v[j] != kPad && pads > 0)) {
        return bad_base64("unexpected character at offset " + std::to_string(i + j));
      }
      if (v[j] == kPad) {
        ++pads;
        v[j] = 0;
      }
    }
    const uint32_t group = static_cast<uint32_t>(v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3]);
    out.push_back(static_cast<uint8_t>(group >> 16));
    if (pads < 2) out.push_back(static_cast<uint8_t>(group >> 8));
    if (pads < 1) out.push_back(static_cast<uint8_t>(group));
  }
  return out;
}

}  // namespace ib::detail
