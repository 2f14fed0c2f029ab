#include "ferry/tokenizer/unicode_normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/errorcode.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include "absl/strings/str_cat.h"

namespace ferry::tokenizer {

absl::StatusOr<std::string> NormalizeUnicode(absl::string_view text,
                                             NormalizationForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = nullptr;
  switch (form) {
    case NormalizationForm::kNfc:
      normalizer = icu::Normalizer2::getNFCInstance(status);
      break;
    case NormalizationForm::kNfd:
      normalizer = icu::Normalizer2::getNFDInstance(status);
      break;
    case NormalizationForm::kNfkc:
      normalizer = icu::Normalizer2::getNFKCInstance(status);
      break;
    case NormalizationForm::kNfkd:
      normalizer = icu::Normalizer2::getNFKDInstance(status);
      break;
  }
  if (U_FAILURE(status) || normalizer == nullptr) {
    return absl::InternalError(
        absl::StrCat("ICU normalizer unavailable: ", u_errorName(status)));
  }
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  // Most text is already normalized: skip the copy then.
  if (normalizer->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) {
    return std::string(text);
  }
  status = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out,
                                        static_cast<int32_t>(text.size()));
  normalizer->normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status)) {
    return absl::InternalError(
        absl::StrCat("ICU normalization failed: ", u_errorName(status)));
  }
  return out;
}

}  // namespace ferry::tokenizer
