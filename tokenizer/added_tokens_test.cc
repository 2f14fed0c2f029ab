#include "ferry/tokenizer/added_tokens.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::tokenizer {
namespace {

using ::testing::ElementsAre;
using Piece = std::pair<std::string, int32_t>;

std::vector<Piece> Split(const AddedTokenMatcher& m, absl::string_view text,
                         bool parse_special = true) {
  std::vector<Segment> segments;
  m.Split(text, parse_special, segments);
  std::vector<Piece> out;
  for (const Segment& s : segments) out.emplace_back(std::string(s.text), s.id);
  return out;
}

TEST(AddedTokensTest, LeftmostLongestAndSpecialFlag) {
  AddedTokenMatcher m({{.id = 1, .content = "<|im"},
                       {.id = 2, .content = "<|im_start|>"},
                       {.id = 3, .content = "[user]", .special = false}});
  EXPECT_THAT(Split(m, "a<|im_start|>b<|imx"),
              ElementsAre(Piece("a", -1), Piece("<|im_start|>", 2),
                          Piece("b", -1), Piece("<|im", 1), Piece("x", -1)));
  // Without parse_special only non-special added tokens match.
  EXPECT_THAT(Split(m, "<|im_start|>[user]", false),
              ElementsAre(Piece("<|im_start|>", -1), Piece("[user]", 3)));
  EXPECT_THAT(Split(m, ""), ElementsAre());
}

TEST(AddedTokensTest, StripAndSingleWord) {
  AddedTokenMatcher m(
      {{.id = 7, .content = "<mask>", .lstrip = true, .rstrip = true},
       {.id = 8, .content = "cat", .single_word = true}});
  EXPECT_THAT(Split(m, "a  <mask>\t b"),
              ElementsAre(Piece("a", -1), Piece("<mask>", 7), Piece("b", -1)));
  EXPECT_THAT(Split(m, "cat concat cats cat"),
              ElementsAre(Piece("cat", 8), Piece(" concat cats ", -1),
                          Piece("cat", 8)));
}

}  // namespace
}  // namespace ferry::tokenizer
