// Unicode normalization forms (NFC, NFD, NFKC, NFKD) of UTF-8 text, as Hugging
// Face normalizers apply them (Qwen's tokenizer.json starts with NFC), done
// by ICU.
#ifndef FERRY_TOKENIZER_UNICODE_NORMALIZER_H_
#define FERRY_TOKENIZER_UNICODE_NORMALIZER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ferry::tokenizer {

enum class NormalizationForm { kNfc, kNfd, kNfkc, kNfkd };

// Returns `text` (valid UTF-8) in `form`. Internal if ICU fails (its data
// missing).
absl::StatusOr<std::string> NormalizeUnicode(absl::string_view text,
                                             NormalizationForm form);

}  // namespace ferry::tokenizer

#endif  // FERRY_TOKENIZER_UNICODE_NORMALIZER_H_
