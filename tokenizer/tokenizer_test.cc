// Tokenizer and StreamDecoder on specs built by hand.
#include "ferry/tokenizer/tokenizer.h"

#include <string>
#include <vector>

#include "ferry/runtime/status_matchers.h"
#include "ferry/tokenizer/stream_decoder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::tokenizer {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kSpace[] = "\xE2\x96\x81";  // "▁"

// A SentencePiece-style tokenizer: "▁" prepended, spaces as "▁", byte
// fallback, <s> prefix, "▁" stripped back on decode.
TokenizerSpec SpmSpec() {
  TokenizerSpec spec;
  spec.tokens = {"<unk>", "<s>", "</s>"};
  spec.kinds = {TokenKind::kUnknown, TokenKind::kControl, TokenKind::kControl};
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    spec.tokens.push_back(hex);
    spec.kinds.push_back(TokenKind::kByte);
  }
  // 259 ▁, 260 h, 261 i, 262 ▁h, 263 ▁hi
  for (std::string t :
       {std::string(kSpace), std::string("h"), std::string("i"),
        std::string(kSpace) + "h", std::string(kSpace) + "hi"}) {
    spec.tokens.push_back(t);
    spec.kinds.push_back(TokenKind::kNormal);
  }
  spec.merges = {{kSpace, "h"}, {std::string(kSpace) + "h", "i"}};
  spec.byte_fallback = true;
  spec.unk_id = 0;
  spec.normalizer = {{NormalizerStep::Kind::kPrepend, "", kSpace},
                     {NormalizerStep::Kind::kReplace, " ", kSpace}};
  spec.added_tokens = {{.id = 1, .content = "<s>"},
                       {.id = 2, .content = "</s>"}};
  spec.prefix_ids = {1};
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.decode_metaspace = true;
  spec.decode_strip_leading_space = true;
  return spec;
}

TEST(TokenizerTest, SentencePieceStyleEncodeDecode) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto tok, Tokenizer::Create(SpmSpec()));
  FERRY_ASSERT_OK_AND_ASSIGN(auto ids, tok->Encode("hi hi"));
  EXPECT_THAT(ids, ElementsAre(263, 263));
  EXPECT_EQ(tok->Decode(ids), "hi hi");
  FERRY_ASSERT_OK_AND_ASSIGN(
      ids, tok->Encode("hi \xF0\x9F\x98\x80", {.add_special = true}));
  // <s> ▁hi ▁ then the emoji's four bytes (3 + byte).
  EXPECT_THAT(ids,
              ElementsAre(1, 263, 259, 3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80));
  EXPECT_EQ(tok->Decode(ids), "<s> hi \xF0\x9F\x98\x80");
  EXPECT_EQ(tok->Decode(ids, {.skip_special = true}), "hi \xF0\x9F\x98\x80");
  // Special tokens in the text, and as text.
  FERRY_ASSERT_OK_AND_ASSIGN(ids, tok->Encode("<s>hi"));
  EXPECT_THAT(ids, ElementsAre(1, 263));
  FERRY_ASSERT_OK_AND_ASSIGN(ids,
                             tok->Encode("</s>", {.parse_special = false}));
  EXPECT_EQ(ids.size(), 5u);  // ▁ + <0x3C> ... as bytes
  EXPECT_EQ(tok->Decode(ids), "</s>");
  EXPECT_EQ(tok->TokenToId("</s>"), 2);
  EXPECT_EQ(tok->TokenToId("nope"), -1);
  EXPECT_EQ(tok->IdToToken(262), std::string(kSpace) + "h");
  EXPECT_EQ(tok->Decode({-5, 100000}), "");
}

TEST(TokenizerTest, RejectsInvalidUtf8AndBadSpecs) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto tok, Tokenizer::Create(SpmSpec()));
  EXPECT_THAT(tok->Encode("ok\xC3("),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not valid UTF-8 at byte 2")));
  TokenizerSpec bad = SpmSpec();
  bad.bos_id = 999;
  EXPECT_THAT(Tokenizer::Create(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("BOS")));
  bad = SpmSpec();
  bad.added_tokens.push_back({.id = 5000, .content = "x"});
  EXPECT_THAT(Tokenizer::Create(bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("added token 'x'")));
  bad = SpmSpec();
  bad.splits = {{"(", SplitBehavior::kIsolated}};
  EXPECT_THAT(Tokenizer::Create(bad),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(StreamDecoderTest, HoldsBackPartialCharacters) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto tok, Tokenizer::Create(SpmSpec()));
  StreamDecoder stream(*tok);
  EXPECT_EQ(stream.Push(263), "hi");  // Leading space stripped once.
  EXPECT_EQ(stream.Push(259), " ");
  EXPECT_EQ(stream.Push(3 + 0xF0), "");
  EXPECT_EQ(stream.Push(3 + 0x9F), "");
  EXPECT_EQ(stream.Push(3 + 0x98), "");
  EXPECT_EQ(stream.pending_bytes(), 3u);
  EXPECT_EQ(stream.Push(3 + 0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(stream.pending_bytes(), 0u);
  // A cut-off character at the end becomes U+FFFD.
  EXPECT_EQ(stream.Push(3 + 0xE2), "");
  EXPECT_EQ(stream.Finish(), "\xEF\xBF\xBD");
  // A byte that can never start a character is not held back.
  EXPECT_EQ(stream.Push(3 + 0xFF), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.Push(263), " hi");  // Same stream: no strip.
}

TEST(StreamDecoderTest, EveryPrefixSplitMatchesDecode) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto tok, Tokenizer::Create(SpmSpec()));
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto ids, tok->Encode("hi é ñ 中文 \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F"
                            "\x91\xA9 hi"));
  StreamDecoder stream(*tok);
  std::string joined;
  for (int32_t id : ids) {
    const std::string piece = stream.Push(id);
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos)
        << "a partial character leaked";
    joined += piece;
  }
  joined += stream.Finish();
  EXPECT_EQ(joined, tok->Decode(ids));
  EXPECT_EQ(joined,
            "hi é ñ 中文 \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 hi");
}

}  // namespace
}  // namespace ferry::tokenizer
