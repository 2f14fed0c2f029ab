#include "ferry/tokenizer/chat_template.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ferry::tokenizer {
namespace {

using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kTestdata[] = "tokenizer/testdata/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Templates that write a default system turn when the messages have none
// (llama.cpp and ferry do not).
bool AddsDefaultSystem(const std::string& file) {
  return file == "smollm2.jinja" || file == "qwen2.5.jinja";
}

// Every case of testdata/chat_templates.json (real models' templates and
// conversations with and without a system prompt, rendered by transformers
// and by llama.cpp): ferry's output equals llama.cpp's, and transformers'
// for a prompt (add_generation_prompt; without it some templates end with
// eos_token, and llama-3's adds the assistant header anyway) where the
// template accepts the messages (gemma's refuses a system turn) and has a
// system message or no default one. Transformers' text has the BOS token a
// template writes; llama.cpp's leaves it to the tokenizer.
TEST(ChatTemplateTest, EqualsTransformersAndLlamaCpp) {
  const auto cases = nlohmann::json::parse(
      ReadFile(absl::StrCat(kTestdata, "chat_templates.json")));
  ASSERT_GT(cases.size(), 20u);
  int with_transformers = 0;
  for (const auto& c : cases) {
    const std::string file = c["template"];
    SCOPED_TRACE(absl::StrCat(file, " ", c["messages"].dump()));
    const std::string source =
        ReadFile(absl::StrCat(kTestdata, "chat_templates/", file));
    ASSERT_FALSE(source.empty()) << file;
    FERRY_ASSERT_OK_AND_ASSIGN(ChatTemplate t,
                               ChatTemplate::FromSource(source, file));
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) {
      messages.push_back({m["role"], m["content"]});
    }
    ChatTemplate::ApplyOptions options;
    options.add_generation_prompt = c["add_generation_prompt"];
    FERRY_ASSERT_OK_AND_ASSIGN(std::string plain, t.Apply(messages, options));
    EXPECT_EQ(plain, c["llama_cpp"].get<std::string>());
    const bool has_system = messages[0].role == "system";
    if (c["transformers"].is_string() && options.add_generation_prompt &&
        (has_system || !AddsDefaultSystem(file))) {
      options.bos_token = c["bos_token"];
      FERRY_ASSERT_OK_AND_ASSIGN(std::string with_bos,
                                 t.Apply(messages, options));
      EXPECT_EQ(with_bos, c["transformers"].get<std::string>());
      ++with_transformers;
    }
  }
  EXPECT_GE(with_transformers, 16);
}

TEST(ChatTemplateTest, RecognisesFamilies) {
  const std::pair<const char*, const char*> cases[] = {
      {"qwen2.5.jinja", "chatml"}, {"qwen3.jinja", "chatml"},
      {"smollm2.jinja", "chatml"}, {"llama3.jinja", "llama3"},
      {"gemma2.jinja", "gemma"},   {"phi3.5.jinja", "phi3"},
  };
  for (const auto& [file, family] : cases) {
    const std::string source =
        ReadFile(absl::StrCat(kTestdata, "chat_templates/", file));
    FERRY_ASSERT_OK_AND_ASSIGN(ChatTemplate t,
                               ChatTemplate::FromSource(source, file));
    EXPECT_EQ(t.name(), family) << file;
  }
}

TEST(ChatTemplateTest, UnknownTemplateIsAnErrorNamingIt) {
  const std::string mistral =
      "{{ bos_token }}{% for message in messages %}[INST] {{ "
      "message['content'] }} [/INST]{% endfor %}";
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::FromSource(mistral, "model.gguf: tokenizer.chat_template");
  EXPECT_THAT(t, StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(t.status().message(),
              HasSubstr("model.gguf: tokenizer.chat_template"));
  EXPECT_THAT(t.status().message(), HasSubstr("[INST]"));
  EXPECT_THAT(ChatTemplate::FromSource("  \n", "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Picked by name instead.
  FERRY_ASSERT_OK_AND_ASSIGN(ChatTemplate chatml,
                             ChatTemplate::FromName("chatml"));
  FERRY_ASSERT_OK_AND_ASSIGN(std::string text, chatml.Apply({{"user", "hi"}}));
  EXPECT_EQ(text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  absl::StatusOr<ChatTemplate> bad = ChatTemplate::FromName("vicuna");
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bad.status().message(), HasSubstr("vicuna"));
}

TEST(ChatTemplateTest, RejectsBadMessages) {
  FERRY_ASSERT_OK_AND_ASSIGN(ChatTemplate t, ChatTemplate::FromName("phi3"));
  EXPECT_THAT(t.Apply({}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(t.Apply({{"", "x"}}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(t.Apply({{"user\n<|system|>", "x"}}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace ferry::tokenizer
