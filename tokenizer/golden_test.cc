// Ids and decodings against the reference implementations, on the corpus in
// testdata/corpus.json (several scripts, whitespace runs, digits, emoji with
// ZWJ sequences, code, special tokens). Goldens come from
// testdata/make_testdata.py: `tokenizers` for the tokenizer.json files,
// llama.cpp for the GGUF vocabularies. SmolLM2 needs the real model
// (tools/fetch_smollm2.sh) and skips, saying so, without it.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/models/gguf/gguf_file.h"
#include "ferry/models/gguf/testing/smollm2.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/tokenizer/gguf_tokenizer.h"
#include "ferry/tokenizer/hf_tokenizer_json.h"
#include "ferry/tokenizer/stream_decoder.h"
#include "ferry/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ferry::tokenizer {
namespace {

using Json = nlohmann::json;
constexpr char kTestdata[] = "tokenizer/testdata/";

Json LoadJson(const std::string& name) {
  std::ifstream in(kTestdata + name);
  EXPECT_TRUE(in) << name;
  std::stringstream s;
  s << in.rdbuf();
  return Json::parse(s.str());
}

std::vector<int32_t> Ids(const Json& j) {
  return j.get<std::vector<int32_t>>();
}

std::string Printable(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += c;
    }
  }
  return out.substr(0, 60);
}

// Decodes `ids` one token at a time; the pieces must join to Decode(ids).
void ExpectStreamMatchesDecode(const Tokenizer& tok,
                               const std::vector<int32_t>& ids) {
  StreamDecoder stream(tok);
  std::string joined;
  for (int32_t id : ids) joined += stream.Push(id);
  joined += stream.Finish();
  EXPECT_EQ(joined, tok.Decode(ids));
}

struct Counts {
  int strings = 0, identical = 0;
};

void CheckCases(const Tokenizer& tok, const Json& golden, bool hf_decode,
                Counts& counts) {
  for (const Json& c : golden["cases"]) {
    const std::string text = c["text"];
    SCOPED_TRACE(Printable(text));
    ++counts.strings;
    auto ids = tok.Encode(text, {.add_special = false, .parse_special = true});
    auto as_text =
        tok.Encode(text, {.add_special = false, .parse_special = false});
    auto with_bos =
        tok.Encode(text, {.add_special = true, .parse_special = true});
    ASSERT_TRUE(ids.ok() && as_text.ok() && with_bos.ok());
    EXPECT_EQ(*ids, Ids(c["ids"]));
    EXPECT_EQ(*as_text, Ids(c["ids_special_as_text"]));
    EXPECT_EQ(*with_bos, Ids(c["ids_add_special"]));
    if (*ids == Ids(c["ids"]) && *as_text == Ids(c["ids_special_as_text"]) &&
        *with_bos == Ids(c["ids_add_special"])) {
      ++counts.identical;
    }
    if (hf_decode) {
      EXPECT_EQ(tok.Decode(Ids(c["ids"])), c["decoded"].get<std::string>());
      EXPECT_EQ(tok.Decode(Ids(c["ids_add_special"]), {.skip_special = true}),
                c["decoded_skip_special"].get<std::string>());
    } else {
      // llama-cpp-python's per-token pieces keep SentencePiece's leading
      // space, so GGUF decodes are checked as round trips (SentencePiece
      // prepends "▁" after every special token, so only without them).
      bool has_control = false;
      for (int32_t id : *ids) {
        has_control |= tok.Kind(id) == TokenKind::kControl;
      }
      if (!has_control) {
        EXPECT_EQ(tok.Decode(*ids), text);
      }
    }
    ExpectStreamMatchesDecode(tok, *ids);
    ExpectStreamMatchesDecode(tok, *with_bos);
  }
}

void Report(const char* name, const Counts& counts) {
  std::printf("%s: ids identical to the reference on %d of %d strings\n", name,
              counts.identical, counts.strings);
}

class HfJsonGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HfJsonGoldenTest, MatchesTokenizersLibrary) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto tok, TokenizerFromHfJsonFile(std::string(kTestdata) + GetParam() +
                                        ".tokenizer.json"));
  Counts counts;
  CheckCases(*tok, LoadJson("golden_" + GetParam() + ".json"), true, counts);
  Report(GetParam().c_str(), counts);
  EXPECT_EQ(counts.identical, counts.strings);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, HfJsonGoldenTest,
                         ::testing::Values("bytelevel", "llama3_style",
                                           "qwen2_style", "spm_style"));

// llama.cpp turns tokens whose text looks like a control token
// (<|endoftext|>, <|im_end|>, ...) into control tokens even where the file
// says "normal"; ferry follows the file. To compare the algorithms, the
// golden lists those ids and the spec gets the same promotion.
absl::StatusOr<std::unique_ptr<Tokenizer>> LikeLlamaCpp(const gguf::GgufFile& f,
                                                        const Json& golden) {
  FERRY_ASSIGN_OR_RETURN(TokenizerSpec spec, TokenizerSpecFromGguf(f));
  for (int32_t id : Ids(golden["llama_cpp_promoted_to_control"])) {
    spec.kinds[id] = TokenKind::kControl;
    spec.added_tokens.push_back({.id = id, .content = spec.tokens[id]});
  }
  return Tokenizer::Create(std::move(spec));
}

// The test vocabularies as GGUF files: SentencePiece-style ("llama"), and
// byte-level ("gpt2") with llama.cpp's "llama-bpe" and "qwen2" pre-tokenizers.
class GgufGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufGoldenTest, MatchesLlamaCpp) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      gguf::GgufFile f,
      gguf::GgufFile::Open(std::string(kTestdata) + GetParam() + ".gguf"));
  const Json golden = LoadJson("golden_" + GetParam() + "_gguf.json");
  FERRY_ASSERT_OK_AND_ASSIGN(auto tok, LikeLlamaCpp(f, golden));
  Counts counts;
  CheckCases(*tok, golden, false, counts);
  Report((GetParam() + ".gguf").c_str(), counts);
  EXPECT_EQ(counts.identical, counts.strings);
}

INSTANTIATE_TEST_SUITE_P(LlamaCpp, GgufGoldenTest,
                         ::testing::Values("spm_style", "llama3_style",
                                           "qwen2_style"));

TEST(SpmGgufTest, SpecialIds) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      gguf::GgufFile f,
      gguf::GgufFile::Open(std::string(kTestdata) + "spm_style.gguf"));
  FERRY_ASSERT_OK_AND_ASSIGN(auto tok, TokenizerFromGguf(f));
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->Kind(0), TokenKind::kUnknown);
  EXPECT_EQ(tok->Kind(3 + 0x41), TokenKind::kByte);
}

TEST(SmolLm2GoldenTest, MatchesLlamaCppAndTokenizers) {
  FERRY_REQUIRE_SMOLLM2(path);
  FERRY_ASSERT_OK_AND_ASSIGN(gguf::GgufFile f, gguf::GgufFile::Open(path));
  FERRY_ASSERT_OK_AND_ASSIGN(auto tok, TokenizerFromGguf(f));
  const Json golden = LoadJson("golden_smollm2.json");
  // SmolLM2's file already marks its control tokens.
  EXPECT_TRUE(golden["llama_cpp_promoted_to_control"].empty());
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  Counts counts;
  CheckCases(*tok, golden, false, counts);
  for (const Json& c : golden["cases"]) {
    EXPECT_EQ(tok->Decode(Ids(c["ids"])), c["decoded"].get<std::string>());
  }
  Report("SmolLM2 GGUF", counts);
  EXPECT_EQ(counts.identical, counts.strings);
}

}  // namespace
}  // namespace ferry::tokenizer
