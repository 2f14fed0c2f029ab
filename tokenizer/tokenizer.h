// Tokenizer: BPE encode and decode for the tokenizers LLMs ship (byte-level
// BPE as in GPT-2 / Llama 3 / Qwen / SmolLM2; SentencePiece-style BPE with
// byte fallback as in Llama 2 / TinyLlama). Built from a TokenizerSpec,
// which gguf_tokenizer.h and hf_tokenizer_json.h make from a GGUF file's
// metadata or a Hugging Face tokenizer.json.
//
// Encode: the text is split around added/special tokens, each segment is
// normalized, pre-tokenized (regex splits), byte-level mapped if the model
// is byte-level, and BPE-merged; add_special puts BOS (and whatever the
// spec's template adds) around it. Decode maps ids back to bytes; the
// result is valid UTF-8 (invalid byte runs become U+FFFD), and
// StreamDecoder does the same incrementally.
//
// Use:
//   FERRY_ASSIGN_OR_RETURN(auto tok, TokenizerFromGguf(gguf_file));
//   FERRY_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
//                          tok->Encode("Hello", {.add_special = true}));
//   std::string text = tok->Decode(ids);
#ifndef FERRY_TOKENIZER_TOKENIZER_H_
#define FERRY_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ferry/tokenizer/added_tokens.h"
#include "ferry/tokenizer/bpe_model.h"
#include "ferry/tokenizer/regex_splitter.h"
#include "ferry/tokenizer/tokenizer_spec.h"

namespace ferry::tokenizer {

struct EncodeOptions {
  // Put the spec's prefix (BOS) and suffix ids around the text.
  bool add_special = false;
  // Recognize special tokens written in the text ("<|im_start|>"). Off,
  // they are tokenized as plain text (non-special added tokens still match).
  bool parse_special = true;
};

struct DecodeOptions {
  // Leave out control tokens (BOS, EOS, chat markers).
  bool skip_special = false;
};

// Thread-safe: Encode and Decode may run concurrently.
class Tokenizer {
 public:
  // Validates `spec` and builds the tables. InvalidArgument naming the
  // token, merge or regex that is wrong.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(TokenizerSpec spec);

  // Encodes UTF-8 `text`. InvalidArgument (naming the byte offset) if it is
  // not valid UTF-8.
  absl::StatusOr<std::vector<int32_t>> Encode(
      absl::string_view text, const EncodeOptions& options = {}) const;

  // Decodes `ids` to valid UTF-8. Ids outside the vocabulary decode to
  // nothing.
  std::string Decode(absl::Span<const int32_t> ids,
                     const DecodeOptions& options = {}) const;

  // The bytes token `id` contributes to decoded text (possibly a partial
  // UTF-8 sequence), before the leading-space strip. Empty for ids outside
  // the vocabulary and, with skip_special, for control tokens.
  std::string TokenBytes(int32_t id, const DecodeOptions& options = {}) const;

  int32_t vocab_size() const {
    return static_cast<int32_t>(spec_.tokens.size());
  }
  int32_t bos_id() const { return spec_.bos_id; }
  int32_t eos_id() const { return spec_.eos_id; }
  // The vocabulary entry's text (as stored), or "" outside the vocabulary.
  absl::string_view IdToToken(int32_t id) const;
  // The id of a vocabulary entry or added token with this text, or -1.
  int32_t TokenToId(absl::string_view text) const;
  TokenKind Kind(int32_t id) const;
  const TokenizerSpec& spec() const { return spec_; }

 private:
  explicit Tokenizer(TokenizerSpec spec);

  // Appends the ids of one segment of plain text.
  void EncodeText(absl::string_view text, std::vector<int32_t>& out) const;

  TokenizerSpec spec_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<AddedTokenMatcher> added_;
  std::vector<std::unique_ptr<RegexSplitter>> splitters_;
};

}  // namespace ferry::tokenizer

#endif  // FERRY_TOKENIZER_TOKENIZER_H_
