// TokenizerSpec: everything a BPE tokenizer is made of, as plain data. The
// loaders (GGUF metadata, Hugging Face tokenizer.json) fill one in; the
// Tokenizer validates it and builds its tables. One spec type covers both
// families:
//   - byte-level BPE (GPT-2, Llama 3, Qwen, SmolLM2): regex pre-splits,
//     bytes mapped to GPT-2's alphabet, merges applied by rank;
//   - SentencePiece-style BPE (Llama 2, TinyLlama): spaces become "▁", a
//     "▁" is prepended, characters missing from the vocabulary become
//     <0xXX> byte tokens; merges by rank (HF) or by token score (llama.cpp).
#ifndef FERRY_TOKENIZER_TOKENIZER_SPEC_H_
#define FERRY_TOKENIZER_TOKENIZER_SPEC_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ferry/tokenizer/regex_splitter.h"

namespace ferry::tokenizer {

// Token attributes (llama.cpp's token types; HF added tokens map onto
// kControl when special, kUserDefined when not).
enum class TokenKind : uint8_t {
  kNormal,
  kUnknown,
  kControl,      // Special: BOS, EOS, chat markers. Decoded only on request.
  kUserDefined,  // Added text matched whole in the input.
  kUnused,
  kByte,  // <0xXX>: one raw byte.
};

// A token matched in the raw text before normalization (HF added tokens,
// llama.cpp control/user-defined tokens).
struct AddedTokenSpec {
  int32_t id = -1;
  std::string content;
  bool special = true;       // Matched only when EncodeOptions::parse_special.
  bool lstrip = false;       // Swallows the whitespace before it.
  bool rstrip = false;       // Swallows the whitespace after it.
  bool single_word = false;  // Not inside a word.
};

// A text rewrite applied to each segment between added tokens.
struct NormalizerStep {
  enum class Kind { kPrepend, kReplace, kNfc, kNfd, kNfkc, kNfkd };
  Kind kind = Kind::kReplace;
  std::string pattern;  // kReplace: what is replaced (a literal string).
  std::string content;  // What is prepended, or the replacement.
};

struct TokenizerSpec {
  enum class MergeOrder {
    kRank,   // Lowest-rank merge first (HF BPE, GGUF "gpt2").
    kScore,  // Highest-score vocabulary token first (GGUF "llama", as
             // llama.cpp's SentencePiece tokenizer does).
  };
  MergeOrder merge_order = MergeOrder::kRank;

  // The vocabulary: id -> text as stored (byte-level characters, "▁", ...).
  std::vector<std::string> tokens;
  std::vector<TokenKind> kinds;  // Empty: all kNormal (added tokens aside).
  std::vector<float> scores;     // kScore only.
  // Merges in rank order, as the two texts merged.
  std::vector<std::pair<std::string, std::string>> merges;

  std::vector<NormalizerStep> normalizer;
  // Pre-tokenizer: regex splits applied in order to every piece.
  std::vector<std::pair<std::string, SplitBehavior>> splits;
  // Map bytes to GPT-2's alphabet before the model (ByteLevel).
  bool byte_level = false;
  // HF ByteLevel add_prefix_space: a space before each segment that does
  // not start with one.
  bool byte_level_add_prefix_space = false;

  bool byte_fallback = false;  // Unknown characters as <0xXX> tokens.
  int32_t unk_id = -1;         // Else unknown characters become this...
  bool fuse_unk = false;       // ...once per run of them.
  bool ignore_merges = false;  // A word that is a token is not split.

  std::vector<AddedTokenSpec> added_tokens;

  // Encoding with add_special: ids put around every text.
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;
  int32_t bos_id = -1;
  int32_t eos_id = -1;

  // Decoding: "▁" becomes a space; one leading space of the whole output is
  // dropped (the one the prepend added).
  bool decode_metaspace = false;
  bool decode_strip_leading_space = false;
};

}  // namespace ferry::tokenizer

#endif  // FERRY_TOKENIZER_TOKENIZER_SPEC_H_
