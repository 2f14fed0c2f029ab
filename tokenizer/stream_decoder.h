// StreamDecoder: decodes tokens one at a time as a model generates them,
// returning only complete UTF-8: a character split across tokens (byte
// tokens, or byte-level pieces of an emoji) is held back until its last
// byte arrives. The concatenated output equals Tokenizer::Decode of all
// the tokens.
//
// Use:
//   StreamDecoder stream(*tokenizer);
//   for (int32_t id : generated) std::cout << stream.Push(id);
//   std::cout << stream.Finish();
#ifndef FERRY_TOKENIZER_STREAM_DECODER_H_
#define FERRY_TOKENIZER_STREAM_DECODER_H_

#include <cstdint>
#include <string>

#include "ferry/tokenizer/tokenizer.h"

namespace ferry::tokenizer {

// Thread-compatible. Does not take ownership of the tokenizer, which must
// outlive the decoder.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, DecodeOptions options = {})
      : tokenizer_(tokenizer), options_(options) {}

  // Adds one token; returns the text that is now complete (maybe empty).
  std::string Push(int32_t id);

  // Returns what is held back, invalid or cut-off bytes as U+FFFD, and
  // starts over (the next Push begins a new text).
  std::string Finish();

  // Bytes held back for an unfinished character (0 to 3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  DecodeOptions options_;
  std::string pending_;
  bool started_ = false;  // Some byte has been seen (leading-space strip).
};

}  // namespace ferry::tokenizer

#endif  // FERRY_TOKENIZER_STREAM_DECODER_H_
