// Hostile input never crashes a tokenizer: random bytes to Encode (an error
// unless valid UTF-8, then ids that decode back), random ids to Decode and
// StreamDecoder (always valid UTF-8), and mutated tokenizer.json files to
// the loader (a status, never a crash). Run under ASan in CI.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/tokenizer/hf_tokenizer_json.h"
#include "ferry/tokenizer/stream_decoder.h"
#include "ferry/tokenizer/tokenizer.h"
#include "ferry/tokenizer/utf8.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ferry::tokenizer {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class RobustnessTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string json() const {
    return ReadFile("tokenizer/testdata/" + GetParam() + ".tokenizer.json");
  }
};

TEST_P(RobustnessTest, RandomTextAndIds) {
  auto tok = TokenizerFromHfJson(json(), GetParam());
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::mt19937 rng(11);
  // Bytes biased toward UTF-8 lead/continuation bytes, spaces and '<'.
  const std::string alphabet =
      "ab <|>\n\t0\xC3\xA9\xE2\x96\x81\xF0\x9F\x98\x80\x80\xFF";
  for (int i = 0; i < 2000; ++i) {
    std::string text;
    const int n = static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) text += alphabet[rng() % alphabet.size()];
    auto ids = (*tok)->Encode(
        text, {.add_special = (i % 2) == 0, .parse_special = (i % 3) != 0});
    EXPECT_EQ(ids.ok(), IsValidUtf8(text));
    if (ids.ok()) {
      for (int32_t id : *ids) {
        ASSERT_GE(id, 0);
        ASSERT_LT(id, (*tok)->vocab_size());
      }
      EXPECT_TRUE(IsValidUtf8((*tok)->Decode(*ids)));
    }
    std::vector<int32_t> random_ids(rng() % 20);
    for (int32_t& id : random_ids) {
      id = static_cast<int32_t>(rng() % ((*tok)->vocab_size() + 10)) - 5;
    }
    const std::string decoded = (*tok)->Decode(random_ids);
    EXPECT_TRUE(IsValidUtf8(decoded));
    StreamDecoder stream(**tok);
    std::string joined;
    for (int32_t id : random_ids) joined += stream.Push(id);
    joined += stream.Finish();
    EXPECT_EQ(joined, decoded);
  }
}

// Replaces one random node of `j` with a value of another type or range.
void MutateNode(nlohmann::json& j, std::mt19937& rng) {
  nlohmann::json* node = &j;
  while ((node->is_object() || node->is_array()) && !node->empty() &&
         rng() % 4 != 0) {
    auto it = node->begin();
    std::advance(it, rng() % node->size());
    node = &*it;
  }
  switch (rng() % 8) {
    case 0:
      *node = nullptr;
      break;
    case 1:
      *node = -1;
      break;
    case 2:
      *node = int64_t{1} << 40;
      break;
    case 3:
      *node = "\xE2\x96\x81 x";
      break;
    case 4:
      *node = nlohmann::json::array({1, "a", nullptr});
      break;
    case 5:
      *node = nlohmann::json::object({{"type", "Sequence"}});
      break;
    case 6:
      *node = true;
      break;
    default:
      if (node->is_array() && !node->empty()) {
        node->erase(node->begin() + static_cast<long>(rng() % node->size()));
      } else {
        *node = 3.5;
      }
  }
}

TEST_P(RobustnessTest, MutatedJsonGivesAStatus) {
  const nlohmann::json original = nlohmann::json::parse(json());
  std::mt19937 rng(13);
  int loaded = 0;
  for (int i = 0; i < 400; ++i) {
    nlohmann::json mutated = original;
    for (int e = 0; e < 1 + static_cast<int>(rng() % 2); ++e) {
      MutateNode(mutated, rng);
    }
    auto tok = TokenizerFromHfJson(mutated.dump(), "mutated.json");
    if (tok.ok()) {
      ++loaded;
      (void)(*tok)->Encode("Hello, \xD0\xBC\xD0\xB8\xD1\x80! 123 <|im_end|>");
      (void)(*tok)->Decode({0, 1, 2, 3, 300});
    } else {
      EXPECT_NE(tok.status().message().find("mutated.json"),
                absl::string_view::npos)
          << tok.status();
    }
  }
  std::printf("%s: %d of 400 mutations still load\n", GetParam().c_str(),
              loaded);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, RobustnessTest,
                         ::testing::Values("bytelevel", "spm_style"));

}  // namespace
}  // namespace ferry::tokenizer
