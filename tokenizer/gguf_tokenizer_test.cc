#include "ferry/tokenizer/gguf_tokenizer.h"

#include <string>
#include <vector>

#include "ferry/models/gguf/gguf_source.h"
#include "ferry/models/gguf/testing/gguf_builder.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::tokenizer {
namespace {

using ::ferry::gguf::testing::GgufBuilder;
using ::ferry::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

GgufBuilder Gpt2Vocab() {
  GgufBuilder b;
  b.SetString("tokenizer.ggml.model", "gpt2")
      .SetString("tokenizer.ggml.pre", "smollm")
      .SetStrings("tokenizer.ggml.tokens",
                  {"<|endoftext|>", "h", "i", "\xC4\xA0", "\xC4\xA0h",
                   "\xC4\xA0hi", "1", "hi"})
      .SetI32s("tokenizer.ggml.token_type", {3, 1, 1, 1, 1, 1, 1, 1})
      .SetStrings("tokenizer.ggml.merges", {"\xC4\xA0 h", "\xC4\xA0h i", "h i"})
      .SetU32("tokenizer.ggml.bos_token_id", 0)
      .SetU32("tokenizer.ggml.eos_token_id", 0)
      .SetBool("tokenizer.ggml.add_bos_token", true);
  return b;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> FromBytes(const std::string& bytes) {
  gguf::MemoryGgufSource source(bytes, "vocab.gguf");
  FERRY_ASSIGN_OR_RETURN(gguf::GgufFile f, gguf::GgufFile::Parse(source));
  return TokenizerFromGguf(f);
}

TEST(GgufTokenizerTest, Gpt2Vocabulary) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto tok, FromBytes(Gpt2Vocab().Build()));
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto ids, tok->Encode("hi hi11<|endoftext|>", {.add_special = true}));
  EXPECT_THAT(ids, ElementsAre(0, 7, 5, 6, 6, 0));
  EXPECT_EQ(tok->Decode(ids, {.skip_special = true}), "hi hi11");
  FERRY_ASSERT_OK_AND_ASSIGN(
      ids, tok->Encode("<|endoftext|>", {.parse_special = false}));
  EXPECT_TRUE(ids.empty());  // "<", "|", ... are not in this vocabulary.
}

TEST(GgufTokenizerTest, ErrorsNameFileAndKey) {
  EXPECT_THAT(FromBytes(GgufBuilder().Build()),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("vocab.gguf"),
                             HasSubstr("'tokenizer.ggml.model'"))));
  GgufBuilder pre = Gpt2Vocab();
  pre.SetString("tokenizer.ggml.pre", "mystery");
  // Duplicate key: the builder appends, so build a fresh one instead.
  GgufBuilder b;
  b.SetString("tokenizer.ggml.model", "gpt2")
      .SetString("tokenizer.ggml.pre", "mystery")
      .SetStrings("tokenizer.ggml.tokens", {"a"})
      .SetStrings("tokenizer.ggml.merges", {});
  EXPECT_THAT(FromBytes(b.Build()),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("tokenizer.ggml.pre 'mystery'")));
  GgufBuilder unigram;
  unigram.SetString("tokenizer.ggml.model", "t5")
      .SetStrings("tokenizer.ggml.tokens", {"a"});
  EXPECT_THAT(FromBytes(unigram.Build()),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("tokenizer.ggml.model 't5'")));
  GgufBuilder scores;
  scores.SetString("tokenizer.ggml.model", "llama")
      .SetStrings("tokenizer.ggml.tokens", {"a", "b"})
      .SetF32s("tokenizer.ggml.scores", {0.0f});
  EXPECT_THAT(FromBytes(scores.Build()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tokenizer.ggml.scores has 1 entries")));
  GgufBuilder types;
  types.SetString("tokenizer.ggml.model", "gpt2")
      .SetString("tokenizer.ggml.pre", "gpt2")
      .SetStrings("tokenizer.ggml.tokens", {"a"})
      .SetI32s("tokenizer.ggml.token_type", {9})
      .SetStrings("tokenizer.ggml.merges", {});
  EXPECT_THAT(FromBytes(types.Build()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("token_type[0] is 9")));
  GgufBuilder bos;
  bos.SetString("tokenizer.ggml.model", "gpt2")
      .SetString("tokenizer.ggml.pre", "gpt2")
      .SetStrings("tokenizer.ggml.tokens", {"a"})
      .SetStrings("tokenizer.ggml.merges", {"a b"})
      .SetU32("tokenizer.ggml.bos_token_id", 5);
  EXPECT_THAT(FromBytes(bos.Build()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'tokenizer.ggml.bos_token_id' = 5")));
  GgufBuilder merge;
  merge.SetString("tokenizer.ggml.model", "gpt2")
      .SetString("tokenizer.ggml.pre", "gpt2")
      .SetStrings("tokenizer.ggml.tokens", {"a"})
      .SetStrings("tokenizer.ggml.merges", {"a b"});
  EXPECT_THAT(FromBytes(merge.Build()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("vocab.gguf: tokenizer: merge #0"),
                             HasSubstr("'b' is not in the vocabulary"))));
}

}  // namespace
}  // namespace ferry::tokenizer
