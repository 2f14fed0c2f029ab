// GPT-2's byte-level alphabet: every byte maps to one printable code point
// (printable Latin-1 bytes to themselves, the rest to U+0100 upward), so
// byte-level BPE vocabularies hold text, never raw bytes. "Ġ" is a space.
#ifndef FERRY_TOKENIZER_BYTE_LEVEL_H_
#define FERRY_TOKENIZER_BYTE_LEVEL_H_

#include <string>

#include "absl/strings/string_view.h"

namespace ferry::tokenizer {

// Appends the byte-level form of `bytes` (each byte one code point).
void AppendByteLevel(absl::string_view bytes, std::string& out);

// Appends the bytes a byte-level string stands for. Code points outside the
// alphabet (as in added tokens) are appended as their own UTF-8.
void AppendFromByteLevel(absl::string_view text, std::string& out);

}  // namespace ferry::tokenizer

#endif  // FERRY_TOKENIZER_BYTE_LEVEL_H_
