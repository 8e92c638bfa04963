// Byte-level BPE tokenizer from a Hugging Face tokenizer.json (bpe_tokenizer.h).
#include "model/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/detail/bpe_from_json.h"
#include "model/detail/pretokenize.h"
#include "model/gguf_model.h"

namespace ib {
namespace {

using nlohmann::json;

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// GPT-2's byte-to-unicode map: printable bytes stand for themselves, the other 68 bytes take the
// code points 256, 257, ... in byte order, so every byte is a visible character.
std::array<char32_t, 256> byte_to_codepoint() {
  std::array<char32_t, 256> map{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    map[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
  }
  return map;
}

struct Added {
  std::string content;
  int32_t id = 0;
};

class BpeTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "bpe"; }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    size_t start = 0;
    size_t i = 0;
    while (i < text.size()) {
      const Added* hit = nullptr;
      if (added_first_[static_cast<unsigned char>(text[i])]) {
        for (const Added& a : added_) {  // longest first
          if (text.compare(i, a.content.size(), a.content) == 0) {
            hit = &a;
            break;
          }
        }
      }
      if (hit == nullptr) {
        ++i;
        continue;
      }
      encode_segment(text.substr(start, i - start), ids);
      ids.push_back(hit->id);
      i += hit->content.size();
      start = i;
    }
    encode_segment(text.substr(start), ids);
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (const int32_t id : ids) {
      if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || tokens_[id].empty()) {
        out += kReplacementChar;
        continue;
      }
      if (special_[static_cast<size_t>(id)]) continue;
      append_token_bytes(out, tokens_[static_cast<size_t>(id)]);
    }
    return out;
  }

  Status load(const json& doc, const std::string& origin);

 private:
  void encode_segment(std::string_view text, std::vector<int32_t>& ids) const {
    if (text.empty()) return;
    std::string prefixed;
    if (add_prefix_space_ && text.front() != ' ') {
      prefixed.reserve(text.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(text);
      text = prefixed;
    }
    for (std::string_view piece : detail::split_pieces(text, pattern_)) encode_piece(piece, ids);
  }

  void encode_piece(std::string_view piece, std::vector<int32_t>& ids) const {
    std::vector<std::string> symbols;
    symbols.reserve(piece.size());
    std::string whole;
    for (const char ch : piece) {
      std::string s;
      append_utf8(s, byte_map_[static_cast<unsigned char>(ch)]);
      whole += s;
      symbols.push_back(std::move(s));
    }
    if (ignore_merges_) {
      if (auto it = vocab_.find(whole); it != vocab_.end()) return ids.push_back(it->second);
    }
    while (symbols.size() > 1) {
      int best = std::numeric_limits<int>::max();
      std::string best_left;
      std::string best_right;
      for (size_t k = 0; k + 1 < symbols.size(); ++k) {
        auto it = ranks_.find(symbols[k] + ' ' + symbols[k + 1]);
        if (it != ranks_.end() && it->second < best) {
          best = it->second;
          best_left = symbols[k];
          best_right = symbols[k + 1];
        }
      }
      if (best == std::numeric_limits<int>::max()) break;
      std::vector<std::string> merged;
      merged.reserve(symbols.size());
      for (size_t k = 0; k < symbols.size(); ++k) {
        if (k + 1 < symbols.size() && symbols[k] == best_left && symbols[k + 1] == best_right) {
          merged.push_back(symbols[k] + symbols[k + 1]);
          ++k;
        } else {
          merged.push_back(std::move(symbols[k]));
        }
      }
      symbols.swap(merged);
    }
    for (const std::string& s : symbols) {
      if (auto it = vocab_.find(s); it != vocab_.end()) {
        ids.push_back(it->second);
      } else if (unk_id_ >= 0) {
        ids.push_back(unk_id_);
      }
    }
  }

  // A vocabulary string back to bytes through the inverse byte map; a token with a character
  // outside the map (an added token) is its own UTF-8 bytes.
  void append_token_bytes(std::string& out, const std::string& token) const {
    std::string bytes;
    size_t i = 0;
    while (i < token.size()) {
      const auto c = static_cast<unsigned char>(token[i]);
      char32_t cp = c;
      size_t len = 1;
      if (c >= 0xC0 && c < 0xE0 && i + 1 < token.size()) {
        cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3Fu);
        len = 2;
      }
      const int b = cp < inverse_.size() ? inverse_[cp] : -1;
      if (b < 0) {
        out += token;
        return;
      }
      bytes.push_back(static_cast<char>(b));
      i += len;
    }
    out += bytes;
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> tokens_;             // by id
  std::vector<bool> special_;                   // by id: skipped by decode
  std::unordered_map<std::string, int> ranks_;  // "left right" -> merge rank
  std::vector<Added> added_;                    // longest content first
  std::array<bool, 256> added_first_{};         // first bytes of added tokens
  std::array<char32_t, 256> byte_map_ = byte_to_codepoint();
  std::vector<int> inverse_;  // code point -> byte, -1 when none
  detail::SplitPattern pattern_ = detail::SplitPattern::kGpt2;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
};

Status BpeTokenizer::load(const json& doc, const std::string& origin) {
  auto bad = [&](const std::string& what) {
    return user_error(
        fmt::format("{}: {}; only byte-level BPE tokenizer.json files (GPT-2, "
                    "Llama-3, Qwen2) are supported",
                    origin, what));
  };
  if (!doc.is_object() || !doc.contains("model") || !doc["model"].is_object()) {
    return bad("no \"model\" object");
  }
  const json& model = doc["model"];
  if (model.value("type", "BPE") != "BPE") return bad("model type is not BPE");
  if (!model.contains("vocab") || !model["vocab"].is_object()) return bad("no model.vocab");
  if (!model.contains("merges") || !model["merges"].is_array()) return bad("no model.merges");

  // Pre-tokenizer: ByteLevel (GPT-2 regex) or Sequence[Split(regex), ByteLevel(no regex)].
  const json pre = doc.value("pre_tokenizer", json());
  std::vector<json> steps;
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers")) {
    for (const json& s : pre["pretokenizers"]) steps.push_back(s);
  } else if (pre.is_object()) {
    steps.push_back(pre);
  }
  bool byte_level = false;
  std::optional<detail::SplitPattern> pattern;
  for (const json& s : steps) {
    const std::string type = s.is_object() ? s.value("type", "") : "";
    if (type == "ByteLevel") {
      byte_level = true;
      add_prefix_space_ = s.value("add_prefix_space", false);
      if (s.value("use_regex", true)) pattern = detail::SplitPattern::kGpt2;
    } else if (type == "Split") {
      const json p = s.value("pattern", json::object());
      const std::string regex = p.is_object() ? p.value("Regex", "") : "";
      pattern = detail::split_pattern_of(regex);
      if (!pattern) return bad(fmt::format("pre-tokenizer regex '{}' is not a known one", regex));
    } else {
      return bad(fmt::format("pre-tokenizer '{}'", type));
    }
  }
  if (!byte_level) return bad("the pre-tokenizer is not ByteLevel");
  pattern_ = pattern.value_or(detail::SplitPattern::kGpt2);
  ignore_merges_ = model.value("ignore_merges", false);

  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (1 << 24)) {
      return bad(fmt::format("vocab entry '{}' has no valid id", token));
    }
    vocab_[token] = id.get<int32_t>();
  }
  const json& merges = model["merges"];
  for (size_t r = 0; r < merges.size(); ++r) {
    const json& m = merges[r];
    std::string key;
    if (m.is_string()) {
      key = m.get<std::string>();
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      key = m[0].get<std::string>() + ' ' + m[1].get<std::string>();
    } else {
      return bad(fmt::format("merge {} is neither \"a b\" nor [a, b]", r));
    }
    ranks_.emplace(std::move(key), static_cast<int>(r));
  }
  std::vector<std::pair<std::string, int32_t>> specials;
  for (const json& a : doc.value("added_tokens", json::array())) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string() ||
        a["content"].get<std::string>().empty()) {
      return bad("an added token without id or content");
    }
    const int32_t id = a["id"].get<int32_t>();
    if (id < 0 || id > (1 << 24)) return bad("an added token id out of range");
    added_.push_back(Added{a["content"].get<std::string>(), id});
    vocab_[added_.back().content] = id;
    if (a.value("special", false)) specials.emplace_back(added_.back().content, id);
  }
  std::stable_sort(added_.begin(), added_.end(), [](const Added& x, const Added& y) {
    return x.content.size() > y.content.size();
  });
  for (const Added& a : added_) added_first_[static_cast<unsigned char>(a.content[0])] = true;

  int32_t max_id = -1;
  for (const auto& [token, id] : vocab_) max_id = std::max(max_id, id);
  tokens_.assign(static_cast<size_t>(max_id + 1), std::string());
  special_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [token, id] : vocab_) tokens_[static_cast<size_t>(id)] = token;
  for (const auto& [token, id] : specials) special_[static_cast<size_t>(id)] = true;
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    if (auto it = vocab_.find(model["unk_token"].get<std::string>()); it != vocab_.end()) {
      unk_id_ = it->second;
    }
  }
  inverse_.assign(512, -1);
  for (int b = 0; b < 256; ++b) inverse_[byte_map_[static_cast<size_t>(b)]] = b;
  return Ok{};
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> parse_bpe_tokenizer(std::string_view tokenizer_json,
                                                       const std::string& origin) {
  const json doc = json::parse(tokenizer_json.begin(), tokenizer_json.end(), nullptr, false);
  if (doc.is_discarded()) return user_error(fmt::format("{}: not valid JSON", origin));
  return detail::bpe_tokenizer_from_json(doc, origin);
}

Result<std::unique_ptr<Tokenizer>> detail::bpe_tokenizer_from_json(const nlohmann::json& doc,
                                                                   const std::string& origin) {
  auto tokenizer = std::make_unique<BpeTokenizer>();
  try {
    IB_TRY(tokenizer->load(doc, origin));
  } catch (const json::exception& e) {  // a field of an unexpected type
    return user_error(fmt::format("{}: unexpected structure ({})", origin, e.what()));
  }
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

Result<std::unique_ptr<Tokenizer>> load_bpe_tokenizer(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return user_error(fmt::format("cannot read {}", file.string()));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse_bpe_tokenizer(buffer.str(), file.string());
}

bool has_own_tokenizer(const std::string& model) {
  if (names_gguf_file(model)) return gguf_has_tokenizer(model);
  std::error_code ec;
  return !model.empty() &&
         std::filesystem::is_regular_file(std::filesystem::path(model) / "tokenizer.json", ec);
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& model) {
  if (names_gguf_file(model)) return load_gguf_tokenizer(model);
  std::error_code ec;
  const std::filesystem::path file = std::filesystem::path(model) / "tokenizer.json";
  if (!model.empty() && std::filesystem::is_regular_file(file, ec)) {
    return load_bpe_tokenizer(file);
  }
  return make_byte_tokenizer();
}

}  // namespace ib
