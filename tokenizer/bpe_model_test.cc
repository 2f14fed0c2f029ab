// BpeModel on vocabularies built by hand, where the right answer is known.
#include "ferry/tokenizer/bpe_model.h"

#include <string>
#include <vector>

#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::tokenizer {
namespace {

using ::ferry::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<int32_t> Encode(const BpeModel& m, absl::string_view word) {
  std::vector<int32_t> ids;
  m.EncodeWord(word, ids);
  return ids;
}

TEST(BpeModelTest, MergesByRankLowestFirst) {
  TokenizerSpec spec;
  //                0    1    2    3     4     5      6
  spec.tokens = {"a", "b", "c", "ab", "bc", "abc", "aa"};
  // "bc" outranks "ab": "abc" -> a + bc, and no merge makes "abc" then.
  spec.merges = {{"b", "c"}, {"a", "b"}, {"ab", "c"}, {"a", "a"}};
  FERRY_ASSERT_OK_AND_ASSIGN(auto m, BpeModel::Create(spec));
  EXPECT_THAT(Encode(*m, "abc"), ElementsAre(0, 4));
  EXPECT_THAT(Encode(*m, "abab"), ElementsAre(3, 3));
  // Ties go to the leftmost pair: "aaa" -> aa + a.
  EXPECT_THAT(Encode(*m, "aaa"), ElementsAre(6, 0));
  EXPECT_THAT(Encode(*m, "aaaa"), ElementsAre(6, 6));
  // Characters outside the vocabulary vanish (no unk, no byte fallback),
  // and their neighbors may then merge, as in HF's BPE.
  EXPECT_THAT(Encode(*m, "axb"), ElementsAre(3));
}

TEST(BpeModelTest, UnknownCharactersByteFallbackOrUnk) {
  TokenizerSpec spec;
  spec.tokens = {"<unk>", "<0xC3>", "<0xA9>", "a", "b", "ab"};
  spec.merges = {{"a", "b"}};
  spec.byte_fallback = true;
  spec.unk_id = 0;
  FERRY_ASSERT_OK_AND_ASSIGN(auto m, BpeModel::Create(spec));
  EXPECT_THAT(Encode(*m, "ab\xC3\xA9"), ElementsAre(5, 1, 2));  // "abé"
  // "ü" (C3 BC) lacks <0xBC>: unk instead.
  EXPECT_THAT(Encode(*m, "\xC3\xBC"), ElementsAre(0));
  spec.byte_fallback = false;
  spec.fuse_unk = true;
  FERRY_ASSERT_OK_AND_ASSIGN(auto fused, BpeModel::Create(spec));
  EXPECT_THAT(Encode(*fused, "xyzab\xC3\xA9q"), ElementsAre(0, 5, 0));
  EXPECT_EQ(fused->ByteOfToken(2), 0xA9);
  EXPECT_EQ(fused->ByteOfToken(3), -1);
}

TEST(BpeModelTest, IgnoreMergesTakesWholeWords) {
  TokenizerSpec spec;
  spec.tokens = {"a", "b", "c", "ab", "abc", "bc"};
  spec.merges = {{"b", "c"}, {"a", "b"}};
  FERRY_ASSERT_OK_AND_ASSIGN(auto plain, BpeModel::Create(spec));
  EXPECT_THAT(Encode(*plain, "abc"), ElementsAre(0, 5));
  spec.ignore_merges = true;
  FERRY_ASSERT_OK_AND_ASSIGN(auto whole, BpeModel::Create(spec));
  EXPECT_THAT(Encode(*whole, "abc"), ElementsAre(4));
}

TEST(BpeModelTest, ScoreOrderMergesHighestScoringTokenFirst) {
  TokenizerSpec spec;
  spec.merge_order = TokenizerSpec::MergeOrder::kScore;
  //                0        1        2       3    4    5     6     7
  spec.tokens = {"<unk>", "<0xE2>", "<0x82>", "a", "b", "c", "ab", "bc"};
  spec.scores = {0, 0, 0, 0, 0, 0, -2.0f, -1.0f};
  spec.unk_id = 0;
  FERRY_ASSERT_OK_AND_ASSIGN(auto m, BpeModel::Create(spec));
  // "bc" scores higher: a + bc. No merge table needed.
  EXPECT_THAT(Encode(*m, "abc"), ElementsAre(3, 7));
  // "€" (E2 82 AC) is unknown: its bytes, unk for the missing <0xAC>.
  EXPECT_THAT(Encode(*m, "a\xE2\x82\xAC"), ElementsAre(3, 1, 2, 0));
}

TEST(BpeModelTest, RejectsInconsistentSpecs) {
  TokenizerSpec spec;
  EXPECT_THAT(BpeModel::Create(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
  spec.tokens = {"a", "b"};
  spec.merges = {{"a", "b"}};
  EXPECT_THAT(BpeModel::Create(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("merge #0 ('a' + 'b'): 'ab' is not in")));
  spec.merges.clear();
  spec.merge_order = TokenizerSpec::MergeOrder::kScore;
  spec.scores = {1};
  EXPECT_THAT(BpeModel::Create(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("2 tokens but 1 scores")));
}

}  // namespace
}  // namespace ferry::tokenizer
