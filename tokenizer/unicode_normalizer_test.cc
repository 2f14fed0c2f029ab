#include "ferry/tokenizer/unicode_normalizer.h"

#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::tokenizer {
namespace {

TEST(UnicodeNormalizerTest, Forms) {
  // "é" as e + U+0301 and precomposed U+00E9; "ﬁ" ligature (U+FB01).
  const std::string decomposed = "e\xCC\x81", composed = "\xC3\xA9";
  EXPECT_EQ(*NormalizeUnicode(decomposed, NormalizationForm::kNfc), composed);
  EXPECT_EQ(*NormalizeUnicode(composed, NormalizationForm::kNfc), composed);
  EXPECT_EQ(*NormalizeUnicode(composed, NormalizationForm::kNfd), decomposed);
  EXPECT_EQ(*NormalizeUnicode("\xEF\xAC\x81", NormalizationForm::kNfc),
            "\xEF\xAC\x81");
  EXPECT_EQ(*NormalizeUnicode("\xEF\xAC\x81", NormalizationForm::kNfkc), "fi");
  EXPECT_EQ(
      *NormalizeUnicode("caf" + decomposed + " ok", NormalizationForm::kNfkd),
      "caf" + decomposed + " ok");
  EXPECT_EQ(*NormalizeUnicode("", NormalizationForm::kNfc), "");
}

}  // namespace
}  // namespace ferry::tokenizer
