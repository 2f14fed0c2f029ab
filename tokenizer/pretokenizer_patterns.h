// The pre-tokenizer regexes of well-known byte-level BPE vocabularies, as
// published with them (Hugging Face tokenizer.json files, llama.cpp).
#ifndef FERRY_TOKENIZER_PRETOKENIZER_PATTERNS_H_
#define FERRY_TOKENIZER_PRETOKENIZER_PATTERNS_H_

#include "ferry/tokenizer/regex_splitter.h"

namespace ferry::tokenizer {

// Llama 3.
inline constexpr char kLlama3Pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Qwen 2: Llama 3's with single digits.
inline constexpr char kQwen2Pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// HF's Digits pre-tokenizer (Rust's char::is_numeric is \p{N}).
inline constexpr char kDigitPattern[] = "\\p{N}";
inline constexpr char kDigitsPattern[] = "\\p{N}+";

}  // namespace ferry::tokenizer

#endif  // FERRY_TOKENIZER_PRETOKENIZER_PATTERNS_H_
