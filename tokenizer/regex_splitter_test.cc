#include "ferry/tokenizer/regex_splitter.h"

#include <string>
#include <vector>

#include "ferry/runtime/status_matchers.h"
#include "ferry/tokenizer/pretokenizer_patterns.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::tokenizer {
namespace {

using ::ferry::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Split(const std::string& pattern,
                               SplitBehavior behavior, absl::string_view text) {
  auto splitter = RegexSplitter::Create(pattern, behavior);
  EXPECT_TRUE(splitter.ok()) << splitter.status();
  std::vector<absl::string_view> pieces;
  (*splitter)->Split(text, pieces);
  return {pieces.begin(), pieces.end()};
}

TEST(RegexSplitterTest, Gpt2Pattern) {
  EXPECT_THAT(Split(kGpt2Pattern, SplitBehavior::kIsolated,
                    "Hello world's  3.14 café!!\n\n"),
              ElementsAre("Hello", " world", "'s", " ", " 3", ".", "14",
                          " café", "!!", "\n\n"));
  // Unicode letters and numbers, not just ASCII.
  EXPECT_THAT(Split(kGpt2Pattern, SplitBehavior::kIsolated, "Привет ١٢٣"),
              ElementsAre("Привет", " ١٢٣"));
}

TEST(RegexSplitterTest, Llama3PatternGroupsThreeDigits) {
  EXPECT_THAT(Split(kLlama3Pattern, SplitBehavior::kIsolated, "12345 I'M"),
              ElementsAre("123", "45", " I", "'M"));
}

TEST(RegexSplitterTest, Behaviors) {
  EXPECT_THAT(Split("-", SplitBehavior::kIsolated, "a-b--c"),
              ElementsAre("a", "-", "b", "-", "-", "c"));
  EXPECT_THAT(Split("-", SplitBehavior::kRemoved, "a-b--c"),
              ElementsAre("a", "b", "c"));
  EXPECT_THAT(Split("-", SplitBehavior::kMergedWithPrevious, "a-b--c"),
              ElementsAre("a-", "b-", "-", "c"));
  EXPECT_THAT(Split("-", SplitBehavior::kMergedWithNext, "a-b--c"),
              ElementsAre("a", "-b", "-", "-c"));
  EXPECT_THAT(Split(kDigitPattern, SplitBehavior::kIsolated, "ab12c"),
              ElementsAre("ab", "1", "2", "c"));
}

TEST(RegexSplitterTest, EmptyMatchesAndInvalidInput) {
  // A pattern that can match empty must still make progress.
  EXPECT_THAT(Split("x*", SplitBehavior::kIsolated, "abxxc"),
              ElementsAre("a", "b", "xx", "c"));
  // Not valid UTF-8: one unsplit piece.
  EXPECT_THAT(Split(kGpt2Pattern, SplitBehavior::kIsolated, "a b\xFF"),
              ElementsAre("a b\xFF"));
  EXPECT_THAT(
      RegexSplitter::Create("(unclosed", SplitBehavior::kIsolated),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'(unclosed'")));
}

}  // namespace
}  // namespace ferry::tokenizer
