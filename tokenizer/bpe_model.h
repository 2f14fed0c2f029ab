// BpeModel: a BPE vocabulary with its merge rules; turns one pre-tokenized
// word into token ids. Two merge orders (TokenizerSpec::MergeOrder): by
// merge rank, as Hugging Face and llama.cpp's byte-level BPE do, and by
// token score, as llama.cpp's SentencePiece tokenizer does. Both keep the
// word as a linked list of symbols and a heap of candidate merges, so a
// word of n characters costs O(n log n).
#ifndef FERRY_TOKENIZER_BPE_MODEL_H_
#define FERRY_TOKENIZER_BPE_MODEL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/tokenizer/tokenizer_spec.h"

namespace ferry::tokenizer {

// Thread-safe after Create.
class BpeModel {
 public:
  // Builds the tables. InvalidArgument naming the merge or token if a
  // merge names text missing from the vocabulary, sizes disagree, or an
  // id is out of range.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Create(
      const TokenizerSpec& spec);

  // Appends the ids of `word`, which is already in the vocabulary's
  // alphabet (byte-level mapped, "▁" for spaces).
  void EncodeWord(absl::string_view word, std::vector<int32_t>& out) const;

  // The id of the vocabulary entry with this text, or -1.
  int32_t TokenToId(absl::string_view text) const;
  // The id of the <0xXX> token for `byte`, or -1.
  int32_t ByteTokenId(uint8_t byte) const { return byte_ids_[byte]; }
  // The byte a <0xXX> token stands for, or -1.
  int ByteOfToken(int32_t id) const;

 private:
  struct MergeRule {
    int32_t rank;
    int32_t id;  // The merged token.
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) |
           static_cast<uint32_t>(b);
  }
  // Appends byte tokens (or unk) for text the vocabulary lacks.
  void EmitBytes(absl::string_view text, std::vector<int32_t>& out) const;

  BpeModel() = default;

  TokenizerSpec::MergeOrder order_ = TokenizerSpec::MergeOrder::kRank;
  absl::flat_hash_map<std::string, int32_t> token_to_id_;
  absl::flat_hash_map<uint64_t, MergeRule> merges_;
  std::vector<float> scores_;
  std::array<int32_t, 256> byte_ids_;
  absl::flat_hash_map<int32_t, uint8_t> byte_of_id_;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
};

}  // namespace ferry::tokenizer

#endif  // FERRY_TOKENIZER_BPE_MODEL_H_
