// AddedTokenMatcher: finds added and special tokens (chat markers, BOS/EOS
// text, user-defined tokens) in raw text, leftmost-longest, and splits the
// text around them; the segments between go through normalization and the
// model.
#ifndef FERRY_TOKENIZER_ADDED_TOKENS_H_
#define FERRY_TOKENIZER_ADDED_TOKENS_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "ferry/tokenizer/tokenizer_spec.h"

namespace ferry::tokenizer {

// A piece of the input: text for the model (id < 0) or a matched token.
struct Segment {
  absl::string_view text;
  int32_t id = -1;
};

// Thread-safe after construction.
class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(std::vector<AddedTokenSpec> tokens);

  // Appends the segments of `text`; special tokens are matched only when
  // `parse_special`. Whitespace swallowed by lstrip/rstrip (ASCII space,
  // tab, CR, LF) belongs to no segment.
  void Split(absl::string_view text, bool parse_special,
             std::vector<Segment>& out) const;

  const std::vector<AddedTokenSpec>& tokens() const { return tokens_; }

 private:
  // Index of the token matched at text[pos], or -1.
  int MatchAt(absl::string_view text, size_t pos, bool parse_special) const;

  std::vector<AddedTokenSpec> tokens_;
  // Tokens by first byte, longest first.
  std::array<std::vector<int>, 256> by_first_byte_;
};

}  // namespace ferry::tokenizer

#endif  // FERRY_TOKENIZER_ADDED_TOKENS_H_
