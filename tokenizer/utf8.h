// UTF-8 helpers for tokenizers: decoding one code point, encoding one,
// finding where a byte string stops being complete UTF-8 (for streaming
// decode), and lossy conversion of arbitrary bytes to valid UTF-8.
#ifndef FERRY_TOKENIZER_UTF8_H_
#define FERRY_TOKENIZER_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace ferry::tokenizer {

// U+FFFD, what invalid bytes become.
inline constexpr char kReplacementChar[] = "\xEF\xBF\xBD";

struct DecodedChar {
  int32_t code_point;  // -1 if the bytes at the position are not valid.
  int length;          // Bytes consumed: 1 to 4 (1 for an invalid byte).
};

// Decodes the code point starting at s[pos] (pos < s.size()). Rejects
// overlong forms, surrogates and values past U+10FFFF.
DecodedChar DecodeUtf8(absl::string_view s, size_t pos);

// Whether all of `s` is valid UTF-8.
bool IsValidUtf8(absl::string_view s);

// Appends the UTF-8 encoding of `code_point` (must be a valid scalar).
void AppendUtf8(int32_t code_point, std::string& out);

// Length of the longest prefix of `s` that does not end inside an
// incomplete (but so far valid) multi-byte sequence: what a streaming
// decoder may emit now. Invalid bytes count as complete.
size_t CompleteUtf8PrefixLength(absl::string_view s);

// `s` with every maximal invalid subsequence replaced by U+FFFD (as
// Rust's String::from_utf8_lossy and Python's errors="replace" do).
std::string ToValidUtf8(absl::string_view s);

}  // namespace ferry::tokenizer

#endif  // FERRY_TOKENIZER_UTF8_H_
