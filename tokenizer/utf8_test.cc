#include "ferry/tokenizer/utf8.h"

#include <string>

#include "ferry/tokenizer/byte_level.h"
#include "gtest/gtest.h"

namespace ferry::tokenizer {
namespace {

TEST(Utf8Test, DecodesAndRejects) {
  EXPECT_EQ(DecodeUtf8("a", 0).code_point, 'a');
  EXPECT_EQ(DecodeUtf8("\xC3\xA9", 0).code_point, 0xE9);
  EXPECT_EQ(DecodeUtf8("\xE2\x96\x81", 0).code_point, 0x2581);
  const DecodedChar emoji = DecodeUtf8("\xF0\x9F\x98\x80", 0);
  EXPECT_EQ(emoji.code_point, 0x1F600);
  EXPECT_EQ(emoji.length, 4);
  // Overlong, surrogate, past U+10FFFF, lone continuation, cut off.
  for (const char* bad :
       {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x80", "\xE2\x96"}) {
    EXPECT_EQ(DecodeUtf8(bad, 0).code_point, -1) << bad;
    EXPECT_EQ(DecodeUtf8(bad, 0).length, 1);
  }
  EXPECT_TRUE(IsValidUtf8("héllo \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("h\xC3"));
}

TEST(Utf8Test, EncodeRoundTrips) {
  for (int32_t cp : {0x24, 0xE9, 0x2581, 0xFFFD, 0x1F600, 0x10FFFF}) {
    std::string s;
    AppendUtf8(cp, s);
    EXPECT_EQ(DecodeUtf8(s, 0).code_point, cp);
    EXPECT_EQ(DecodeUtf8(s, 0).length, static_cast<int>(s.size()));
  }
}

TEST(Utf8Test, CompletePrefixHoldsBackOnlyUnfinishedSequences) {
  const std::string smile = "\xF0\x9F\x98\x80";
  EXPECT_EQ(CompleteUtf8PrefixLength("ab"), 2u);
  for (size_t cut = 1; cut < 4; ++cut) {
    EXPECT_EQ(CompleteUtf8PrefixLength("ab" + smile.substr(0, cut)), 2u);
  }
  EXPECT_EQ(CompleteUtf8PrefixLength("ab" + smile), 6u);
  // Invalid bytes are not waited for.
  EXPECT_EQ(CompleteUtf8PrefixLength("a\x80"), 2u);
  EXPECT_EQ(CompleteUtf8PrefixLength("a\xC0"), 2u);
  EXPECT_EQ(CompleteUtf8PrefixLength("a\xE2\x28"), 3u);
}

TEST(Utf8Test, LossyConversionReplacesMaximalInvalidRuns) {
  EXPECT_EQ(ToValidUtf8("ok"), "ok");
  EXPECT_EQ(ToValidUtf8("a\xF0\x9F\x98z"), "a\xEF\xBF\xBDz");  // One U+FFFD.
  EXPECT_EQ(ToValidUtf8("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(ToValidUtf8("\xE2\x96"), "\xEF\xBF\xBD");
}

TEST(ByteLevelTest, EveryByteRoundTripsThroughPrintableText) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string mapped;
  AppendByteLevel(all, mapped);
  EXPECT_TRUE(IsValidUtf8(mapped));
  std::string back;
  AppendFromByteLevel(mapped, back);
  EXPECT_EQ(back, all);
  std::string space;
  AppendByteLevel(" \n", space);
  EXPECT_EQ(space, "\xC4\xA0\xC4\x8A");  // "ĠĊ"
  std::string keep;
  AppendFromByteLevel("<|im_end|>\xE2\x96\x81", keep);  // Outside: kept.
  EXPECT_EQ(keep, "<|im_end|>\xE2\x96\x81");
}

}  // namespace
}  // namespace ferry::tokenizer
