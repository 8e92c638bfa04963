// The BPE model of a tokenizer.json (private to model/): vocabulary, ranked merges, byte
// fallback (<0xNN> tokens), unknown-token fusing and ignore_merges. Immutable after parse();
// encode may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/result.h"

namespace ib::detail {

class BpeModel {
 public:
  // User errors name the field: model type other than BPE, a missing vocab or merges, bad ids,
  // continuing_subword_prefix / end_of_word_suffix (not supported).
  static Result<BpeModel> parse(const nlohmann::json& model);

  // Appends the ids of one pre-tokenized piece: its characters merged by rank (lowest first,
  // leftmost among equals, as HF tokenizers); a character outside the vocabulary becomes its
  // <0xNN> byte tokens under byte_fallback, else the unknown token (fused runs when fuse_unk).
  void encode(std::string_view piece, std::vector<int32_t>& ids) const;

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }
  int32_t unk_id() const { return unk_id_; }

 private:
  struct Merge {
    int32_t rank = 0;
    int32_t id = 0;  // the merged token
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;  // pair_key(left id, right id) -> merge
  std::array<int32_t, 256> byte_ids_{};         // <0xNN> ids, -1 where absent
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  int32_t unk_id_ = -1;
};

}  // namespace ib::detail
