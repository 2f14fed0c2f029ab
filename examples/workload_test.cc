#include "ferry/examples/workload.h"

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/tokenizer/chat_template.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ferry::examples {
namespace {

using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

TEST(WorkloadTest, ParsesJsonLines) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto requests,
      ParseRequests(
          absl::StrCat(R"({"id": "a", "tokens": [1, 2, 3], )",
                       R"("max_new_tokens": 5, "stop": [9], )",
                       R"("temperature": 0.5, "top_k": 4, "top_p": 0.9, )",
                       R"("seed": 7, "logits_positions": [2]})",
                       "\n\n  {\"tokens\": [4]}\n"),
          "p.jsonl", 10, 16));
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].id, "a");
  EXPECT_EQ(requests[0].prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(requests[0].max_new_tokens, 5);
  EXPECT_EQ(requests[0].stop_tokens, (std::vector<int32_t>{9}));
  EXPECT_EQ(requests[0].sampling.top_k, 4);
  EXPECT_EQ(requests[0].sampling.seed, 7u);
  EXPECT_FLOAT_EQ(requests[0].sampling.temperature, 0.5f);
  EXPECT_EQ(requests[0].logits_positions, (std::vector<int64_t>{2}));
  EXPECT_EQ(requests[1].id, "3");  // Its line number.
  EXPECT_EQ(requests[1].max_new_tokens, 16);
}

TEST(WorkloadTest, ErrorsNameFileLineAndField) {
  auto parse = [](const char* text) {
    return ParseRequests(text, "p.jsonl", 10, 16).status();
  };
  EXPECT_THAT(parse("{\"tokens\": [1]}\n{oops"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("p.jsonl:2: not a JSON object")));
  EXPECT_THAT(parse(R"({"tokens": [1, 10]})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("p.jsonl:1: \"tokens\"[1] = 10 outside")));
  EXPECT_THAT(parse(R"({"id": "x"})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("exactly one of \"tokens\", \"text\" and "
                                 "\"messages\"")));
  EXPECT_THAT(parse(R"({"text": "hi"})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("p.jsonl:1: \"text\" needs a model")));
  EXPECT_THAT(parse(R"({"tokens": []})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("empty \"tokens\"")));
  EXPECT_THAT(parse(R"({"tokens": [1], "max_new_tokens": 0})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"max_new_tokens\" = 0")));
  EXPECT_THAT(parse(R"({"tokens": [1], "top_p": 2})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("top_p")));
  EXPECT_THAT(parse(R"({"tokens": [1], "temperature": "hot"})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"temperature\" must be a number")));
  EXPECT_THAT(parse("\n\n"), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("no requests")));
}

TEST(WorkloadTest, TextIsEncodedWithTheModelsTokenizer) {
  // One id per byte, offset by 1: enough to see the text went through it.
  const TextEncoder encode =
      [](absl::string_view text) -> absl::StatusOr<std::vector<int32_t>> {
    std::vector<int32_t> ids;
    for (char c : text) ids.push_back(static_cast<unsigned char>(c) + 1);
    return ids;
  };
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto requests, ParseRequests(R"({"text": "ab", "max_new_tokens": 3})",
                                   "p.jsonl", 300, 16, encode));
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].prompt, (std::vector<int32_t>{98, 99}));
  EXPECT_THAT(
      ParseRequests(R"({"text": "ab", "tokens": [1]})", "p.jsonl", 300, 16,
                    encode)
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("exactly one")));
  EXPECT_THAT(
      ParseRequests(R"({"text": ""})", "p.jsonl", 300, 16, encode).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("empty \"text\"")));
  EXPECT_THAT(
      ParseRequests(R"({"text": 7})", "p.jsonl", 300, 16, encode).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("\"text\" must be a string")));
  // Ids past the model's vocabulary ('b' + 1 = 99 >= 99).
  EXPECT_THAT(
      ParseRequests(R"({"text": "ab"})", "p.jsonl", 99, 16, encode).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("id 99")));
}

TEST(WorkloadTest, SyntheticRequestsAreInRangeAndRepeatable) {
  const SyntheticWorkload w{.requests = 20,
                            .min_prompt = 3,
                            .max_prompt = 9,
                            .min_new = 2,
                            .max_new = 5,
                            .seed = 4};
  auto a = MakeRequests(w, 50);
  auto b = MakeRequests(w, 50);
  ASSERT_EQ(a.size(), 20u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_GE(a[i].prompt.size(), 3u);
    EXPECT_LE(a[i].prompt.size(), 9u);
    EXPECT_GE(a[i].max_new_tokens, 2);
    EXPECT_LE(a[i].max_new_tokens, 5);
    for (int32_t t : a[i].prompt) EXPECT_LT(t, 50);
    EXPECT_EQ(a[i].prompt, b[i].prompt);
  }
}

TEST(WorkloadTest, ResultsAreJsonLines) {
  engine::Result r;
  r.id = "q";
  r.tokens = {5, 6};
  r.submitted_ns = 0;
  r.first_token_ns = 2000000;
  r.finished_ns = 5000000;
  r.token_ns = {2000000, 5000000};
  const auto j = nlohmann::json::parse(ResultToJson(r, 3, {{2, 0}}));
  EXPECT_EQ(j["id"], "q");
  EXPECT_EQ(j["tokens"], nlohmann::json::array({5, 6}));
  EXPECT_EQ(j["finish"], "length");
  EXPECT_DOUBLE_EQ(j["ttft_ms"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["itl_ms_mean"].get<double>(), 3.0);
  EXPECT_EQ(j["logits_rows"]["2"], 0);
  EXPECT_FALSE(j.contains("text"));
  const std::string text = "caf\u00e9";
  EXPECT_EQ(nlohmann::json::parse(ResultToJson(r, 3, {}, &text))["text"], text);
}

// "messages" go through the chat formatter, then the encoder; the encoder
// here records what it was given.
struct ChatFixture {
  std::vector<std::string> encoded;
  TextEncoder encode =
      [this](absl::string_view text) -> absl::StatusOr<std::vector<int32_t>> {
    encoded.emplace_back(text);
    return std::vector<int32_t>{1, 2};
  };
  ChatFormatter chatml = [](absl::Span<const tokenizer::ChatMessage> m) {
    absl::StatusOr<tokenizer::ChatTemplate> t =
        tokenizer::ChatTemplate::FromName("chatml");
    if (!t.ok()) return absl::StatusOr<std::string>(t.status());
    return t->Apply(m);
  };
  absl::Status Parse(absl::string_view text) {
    return ParseRequests(text, "p.jsonl", 10, 16, encode, chatml).status();
  }
};

TEST(WorkloadTest, MessagesAreFormattedWithTheChatTemplate) {
  ChatFixture f;
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto requests,
      ParseRequests(
          absl::StrCat(R"({"id": "m", "messages": [)",
                       R"({"role": "system", "content": "Be brief."}, )",
                       R"({"role": "user", "content": "Hi"}], )",
                       R"("max_new_tokens": 3})", "\n", R"({"text": "plain"})"),
          "p.jsonl", 10, 16, f.encode, f.chatml));
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].id, "m");
  EXPECT_EQ(requests[0].prompt, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(requests[0].max_new_tokens, 3);
  ASSERT_EQ(f.encoded.size(), 2u);
  EXPECT_EQ(f.encoded[0],
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(f.encoded[1], "plain");  // "text" is not templated.
}

TEST(WorkloadTest, BadMessagesNameLineAndField) {
  ChatFixture f;
  auto invalid = [](absl::string_view want) {
    return StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(want));
  };
  EXPECT_THAT(f.Parse(R"({"messages": "hi"})"),
              invalid("p.jsonl:1: \"messages\" must be a non-empty array"));
  EXPECT_THAT(f.Parse(R"({"messages": []})"),
              invalid("\"messages\" must be a non-empty array"));
  EXPECT_THAT(f.Parse(R"({"messages": [{"role": "user", "content": "a"}, 3]})"),
              invalid("\"messages\"[1] must be an object"));
  EXPECT_THAT(f.Parse(R"({"messages": [{"role": "user"}]})"),
              invalid("\"messages\"[0].content must be a string"));
  EXPECT_THAT(f.Parse(R"({"messages": [{"role": 1, "content": "a"}]})"),
              invalid("\"messages\"[0].role must be a string"));
  // The template's own check (an empty role), with the line.
  EXPECT_THAT(f.Parse(R"({"messages": [{"role": "", "content": "a"}]})"),
              invalid("p.jsonl:1: \"messages\": "));
  EXPECT_THAT(
      f.Parse(
          R"({"tokens": [1], "messages": [{"role": "user", "content": "a"}]})"),
      invalid("exactly one of"));
  EXPECT_TRUE(f.encoded.empty());
}

TEST(WorkloadTest, MessagesNeedAChatTemplateAndATokenizer) {
  ChatFixture f;
  const char* line = R"({"messages": [{"role": "user", "content": "a"}]})";
  EXPECT_THAT(ParseRequests(line, "p.jsonl", 10, 16, f.encode).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("p.jsonl:1: \"messages\" need a model with a "
                                 "chat template")));
  EXPECT_THAT(
      ParseRequests(line, "p.jsonl", 10, 16, nullptr, f.chatml).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("\"messages\" needs a model with a tokenizer")));
}

}  // namespace
}  // namespace ferry::examples
