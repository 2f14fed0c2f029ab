#include "ferry/tokenizer/hf_tokenizer_json.h"

#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_replace.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::tokenizer {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A byte-level tokenizer.json written by hand: "Ġ" is the space byte.
constexpr char kByteLevel[] = R"({
  "version": "1.0",
  "added_tokens": [
    {"id": 6, "content": "<|end|>", "special": true, "lstrip": false,
     "rstrip": false, "single_word": false, "normalized": false}
  ],
  "normalizer": null,
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": true},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
     "use_regex": true}]},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<|end|>", "type_id": 0}},
               {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [], "special_tokens": {"<|end|>": {"id": "<|end|>", "ids": [6],
                                              "tokens": ["<|end|>"]}}},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "dropout": null, "unk_token": null,
    "continuing_subword_prefix": null, "end_of_word_suffix": null,
    "fuse_unk": false, "byte_fallback": false,
    "vocab": {"h": 0, "i": 1, "Ġ": 2, "Ġh": 3, "Ġhi": 4, "1": 5,
              "<|end|>": 6, "hi": 7},
    "merges": ["Ġ h", ["Ġh", "i"], "h i"]}
})";

TEST(HfTokenizerJsonTest, ParsesAndEncodes) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto tok, TokenizerFromHfJson(kByteLevel, "t.json", "<|end|>"));
  EXPECT_EQ(tok->bos_id(), 6);
  EXPECT_EQ(tok->eos_id(), 6);
  FERRY_ASSERT_OK_AND_ASSIGN(auto ids, tok->Encode("hi hi11<|end|>"));
  EXPECT_THAT(ids, ElementsAre(7, 4, 5, 5, 6));
  FERRY_ASSERT_OK_AND_ASSIGN(ids, tok->Encode("hi", {.add_special = true}));
  EXPECT_THAT(ids, ElementsAre(6, 7));
  EXPECT_EQ(tok->Decode({7, 4, 5, 6}), "hi hi1<|end|>");
  EXPECT_EQ(tok->Decode({7, 4, 5, 6}, {.skip_special = true}), "hi hi1");
}

TEST(HfTokenizerJsonTest, ErrorsNameFileAndComponent) {
  auto with = [](absl::string_view from, absl::string_view to) {
    return absl::StrReplaceAll(kByteLevel, {{from, to}});
  };
  EXPECT_THAT(TokenizerFromHfJson("{not json", "t.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("t.json: (root): not valid JSON")));
  EXPECT_THAT(
      TokenizerFromHfJson(with(R"("normalizer": null)",
                               R"("normalizer": {"type": "Lowercase"})"),
                          "t.json"),
      StatusIs(absl::StatusCode::kUnimplemented,
               HasSubstr("normalizer: normalizer 'Lowercase'")));
  EXPECT_THAT(TokenizerFromHfJson(
                  with(R"("type": "BPE")", R"("type": "Unigram")"), "t.json"),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("model.type: 'Unigram'")));
  EXPECT_THAT(TokenizerFromHfJson(with(R"("h i"])", R"("h x"])"), "t.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("t.json"), HasSubstr("merge #2"))));
  EXPECT_THAT(TokenizerFromHfJson(with(R"("h i"])", R"("h i j"])"), "t.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.merges[2]")));
  EXPECT_THAT(TokenizerFromHfJson(with(R"("i": 1)", R"("i": "one")"), "t.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.vocab[\"i\"]")));
  // An id far past the entries the file has: an error, not a huge table.
  EXPECT_THAT(
      TokenizerFromHfJson(with(R"("i": 1)", R"("i": 16000000)"), "t.json"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("id 16000000 is outside [0, 9)")));
  EXPECT_THAT(TokenizerFromHfJson(with(R"("i": 1)", R"("i": 0)"), "t.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("id 0 is used twice")));
  EXPECT_THAT(TokenizerFromHfJson(
                  with(R"("use_regex": true)", R"("use_regex": 1)"), "t.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("use_regex: not a boolean")));
  EXPECT_THAT(TokenizerFromHfJson(kByteLevel, "t.json", "<|nope|>"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'<|nope|>' is not a token")));
  EXPECT_THAT(TokenizerFromHfJsonFile("/nonexistent/tokenizer.json"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("/nonexistent/tokenizer.json")));
}

void WriteFile(const std::string& path, absl::string_view text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

TEST(HfTokenizerDirectoryTest, ReadsTokenizerAndConfig) {
  const std::string dir = ::testing::TempDir();
  WriteFile(dir + "/tokenizer.json", kByteLevel);
  ::unlink((dir + "/tokenizer_config.json").c_str());
  FERRY_ASSERT_OK_AND_ASSIGN(HfDirectoryTokenizer t,
                             TokenizerFromHfDirectory(dir));
  EXPECT_EQ(t.tokenizer->eos_id(), -1);  // tokenizer.json has no EOS.
  EXPECT_EQ(t.chat_template, "");
  WriteFile(dir + "/tokenizer_config.json",
            R"({"eos_token": {"content": "<|end|>", "special": true},
                "chat_template": "{{ messages }}"})");
  FERRY_ASSERT_OK_AND_ASSIGN(t, TokenizerFromHfDirectory(dir));
  EXPECT_EQ(t.tokenizer->eos_id(), 6);
  EXPECT_EQ(t.chat_template, "{{ messages }}");
  WriteFile(dir + "/tokenizer_config.json", R"({"eos_token": "hi"})");
  FERRY_ASSERT_OK_AND_ASSIGN(t, TokenizerFromHfDirectory(dir));
  EXPECT_EQ(t.tokenizer->eos_id(), 7);
  WriteFile(dir + "/tokenizer_config.json", R"({"eos_token": 6})");
  EXPECT_THAT(TokenizerFromHfDirectory(dir),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("tokenizer_config.json"),
                             HasSubstr("'eos_token'"))));
  WriteFile(dir + "/tokenizer_config.json", R"({"eos_token": "nope"})");
  EXPECT_THAT(TokenizerFromHfDirectory(dir),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nope")));
  WriteFile(dir + "/tokenizer_config.json", "[");
  EXPECT_THAT(TokenizerFromHfDirectory(dir),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tokenizer_config.json")));
  EXPECT_THAT(TokenizerFromHfDirectory("/nonexistent"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("/nonexistent/tokenizer.json")));
}

}  // namespace
}  // namespace ferry::tokenizer
