// The BPE model (bpe_model.h): HF tokenizers' merge order, a min-heap of adjacent pairs keyed by
// (rank, position) over a linked list of symbols.
#include "model/detail/bpe_model.h"

#include <queue>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ib::detail {
namespace {

using nlohmann::json;

constexpr int64_t kMaxId = int64_t{1} << 24;

size_t utf8_length(unsigned char c) {
  return c < 0x80 ? 1 : c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

struct Symbol {
  int32_t id = 0;
  int32_t prev = -1;
  int32_t next = -1;
  bool alive = true;
};

struct Candidate {
  int32_t rank = 0;
  int32_t left = 0;  // symbol index
  int32_t left_id = 0;
  int32_t right_id = 0;
  bool operator>(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : left > o.left;
  }
};

}  // namespace

Result<BpeModel> BpeModel::parse(const json& model) {
  if (!model.is_object()) return user_error("no \"model\" object");
  const std::string type = model.value("type", "BPE");
  if (type != "BPE") {
    return user_error(
        fmt::format("model type '{}' is not supported; inferbench reads BPE", type.substr(0, 64)));
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) return user_error("no model.vocab");
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return user_error("no model.merges");
  }
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(field) && model[field].is_string() &&
        !model[field].get<std::string>().empty()) {
      return user_error(fmt::format("model.{} is not supported", field));
    }
  }
  BpeModel m;
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxId) {
      return user_error(fmt::format("vocab entry '{}' has no valid id", token.substr(0, 64)));
    }
    m.vocab_[token] = id.get<int32_t>();
  }
  const json& merges = model["merges"];
  for (size_t r = 0; r < merges.size(); ++r) {
    const json& item = merges[r];
    std::string left;
    std::string right;
    if (item.is_string()) {
      const std::string s = item.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos) return user_error(fmt::format("merge {} is not \"a b\"", r));
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (item.is_array() && item.size() == 2 && item[0].is_string() && item[1].is_string()) {
      left = item[0].get<std::string>();
      right = item[1].get<std::string>();
    } else {
      return user_error(fmt::format("merge {} is neither \"a b\" nor [a, b]", r));
    }
    const auto a = m.vocab_.find(left);
    const auto b = m.vocab_.find(right);
    const auto ab = m.vocab_.find(left + right);
    if (a == m.vocab_.end() || b == m.vocab_.end() || ab == m.vocab_.end()) continue;
    m.merges_.emplace(pair_key(a->second, b->second), Merge{static_cast<int32_t>(r), ab->second});
  }
  m.byte_fallback_ = model.value("byte_fallback", false);
  m.ignore_merges_ = model.value("ignore_merges", false);
  m.fuse_unk_ = model.value("fuse_unk", false);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    if (auto it = m.vocab_.find(model["unk_token"].get<std::string>()); it != m.vocab_.end()) {
      m.unk_id_ = it->second;
    }
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = m.vocab_.find(fmt::format("<0x{:02X}>", b));
    m.byte_ids_[static_cast<size_t>(b)] = it == m.vocab_.end() ? -1 : it->second;
  }
  return m;
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(std::string(piece)); it != vocab_.end())
      return ids.push_back(it->second);
  }
  std::vector<Symbol> symbols;  // (characters of piece)
  symbols.reserve(piece.size());
  std::string ch;
  bool previous_unk = false;
  for (size_t i = 0; i < piece.size();) {
    const size_t len =
        std::min(utf8_length(static_cast<unsigned char>(piece[i])), piece.size() - i);
    ch.assign(piece.substr(i, len));
    i += len;
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      symbols.push_back({it->second});
      previous_unk = false;
      continue;
    }
    bool all_bytes = byte_fallback_;
    for (const char c : ch) all_bytes = all_bytes && byte_ids_[static_cast<unsigned char>(c)] >= 0;
    if (all_bytes) {
      for (const char c : ch) symbols.push_back({byte_ids_[static_cast<unsigned char>(c)]});
      previous_unk = false;
    } else if (unk_id_ >= 0 && !(fuse_unk_ && previous_unk)) {
      symbols.push_back({unk_id_});
      previous_unk = true;
    }
  }
  const auto n = static_cast<int32_t>(symbols.size());
  for (int32_t k = 0; k < n; ++k) {
    symbols[static_cast<size_t>(k)].prev = k - 1;
    symbols[static_cast<size_t>(k)].next = k + 1 < n ? k + 1 : -1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[static_cast<size_t>(left)].next;
    if (right < 0) return;
    const int32_t a = symbols[static_cast<size_t>(left)].id;
    const int32_t b = symbols[static_cast<size_t>(right)].id;
    if (auto it = merges_.find(pair_key(a, b)); it != merges_.end()) {
      heap.push({it->second.rank, left, a, b});
    }
  };
  for (int32_t k = 0; k + 1 < n; ++k) push(k);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = symbols[static_cast<size_t>(c.left)];
    if (!left.alive || left.id != c.left_id || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    if (right.id != c.right_id) continue;
    left.id = merges_.at(pair_key(c.left_id, c.right_id)).id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = c.left;
    push(left.prev);
    push(c.left);
  }
  for (const Symbol& s : symbols) {
    if (s.alive) ids.push_back(s.id);
  }
}

}  // namespace ib::detail
