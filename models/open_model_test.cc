#include "ferry/models/open_model.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/models/gguf/testing/gguf_builder.h"
#include "ferry/models/gguf/testing/smollm2.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ferry {
namespace {

using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

class OpenModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FERRY_ASSERT_OK_AND_ASSIGN(cpu_, GetCpuDevice().CreateBackend("threads=1"));
  }
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = absl::StrCat(::testing::TempDir(), "/", name);
    FILE* f = std::fopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
    return path;
  }
  std::unique_ptr<Backend> cpu_;
};

TEST_F(OpenModelTest, OpensGgufWithTokenizerAndTemplate) {
  FERRY_REQUIRE_SMOLLM2(path);
  FERRY_ASSERT_OK_AND_ASSIGN(OpenedModel m, OpenModel(path, {cpu_.get()}));
  EXPECT_EQ(m.format, ModelFormat::kGguf);
  ASSERT_NE(m.model, nullptr);
  EXPECT_EQ(m.model->config().n_layer, 30);
  ASSERT_NE(m.tokenizer, nullptr);
  EXPECT_EQ(m.tokenizer->IdToToken(m.tokenizer->eos_id()), "<|im_end|>");
  ASSERT_TRUE(m.chat_template.has_value());
  EXPECT_EQ(m.chat_template->name(), "chatml");
  EXPECT_THAT(m.summary, HasSubstr(path));
}

TEST_F(OpenModelTest, CallerPicksOrDropsTheTemplate) {
  FERRY_REQUIRE_SMOLLM2(path);
  OpenModelOptions options;
  options.chat_template = "phi3";
  FERRY_ASSERT_OK_AND_ASSIGN(OpenedModel m,
                             OpenModel(path, {cpu_.get()}, options));
  ASSERT_TRUE(m.chat_template.has_value());
  EXPECT_EQ(m.chat_template->name(), "phi3");
  options.chat_template = "none";
  FERRY_ASSERT_OK_AND_ASSIGN(m, OpenModel(path, {cpu_.get()}, options));
  EXPECT_FALSE(m.chat_template.has_value());
  options.chat_template = "alpaca";
  absl::StatusOr<OpenedModel> bad = OpenModel(path, {cpu_.get()}, options);
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bad.status().message(), HasSubstr("alpaca"));
}

// Each tiny model directory (tools/make_tiny_models.py) opens with its
// family's template, whose text for the reference conversation equals
// transformers' apply_chat_template.
TEST_F(OpenModelTest, OpensHfDirectoriesWithTheirTemplates) {
  const std::pair<const char*, const char*> cases[] = {
      {"llama", "llama3"}, {"qwen2", "chatml"}, {"qwen3", "chatml"},
      {"phi3", "phi3"},    {"gemma2", "gemma"},
  };
  for (const auto& [family, template_name] : cases) {
    SCOPED_TRACE(family);
    const std::string dir = absl::StrCat("models/testdata/tiny/", family);
    FERRY_ASSERT_OK_AND_ASSIGN(OpenedModel m, OpenModel(dir, {cpu_.get()}));
    EXPECT_EQ(m.format, ModelFormat::kHuggingFace);
    EXPECT_EQ(m.model->config().arch, family);
    ASSERT_NE(m.tokenizer, nullptr);
    ASSERT_TRUE(m.chat_template.has_value());
    EXPECT_EQ(m.chat_template->name(), template_name);
    std::ifstream in(absl::StrCat(dir, "/reference.json"));
    std::stringstream text;
    text << in.rdbuf();
    const auto ref = nlohmann::json::parse(text.str());
    std::vector<tokenizer::ChatMessage> messages;
    for (const auto& msg : ref["messages"]) {
      messages.push_back({msg["role"], msg["content"]});
    }
    tokenizer::ChatTemplate::ApplyOptions options;
    options.bos_token = m.bos_token;
    FERRY_ASSERT_OK_AND_ASSIGN(std::string chat,
                               m.chat_template->Apply(messages, options));
    EXPECT_EQ(chat, ref["chat_text"].get<std::string>());
  }
}

// The same models converted to GGUF by llama.cpp's converter: the
// template and tokenizer come from the file's metadata.
TEST_F(OpenModelTest, OpensGgufsWithTheirTemplates) {
  const std::pair<const char*, const char*> cases[] = {
      {"llama", "llama3"}, {"qwen2", "chatml"}, {"qwen3", "chatml"},
      {"phi3", "phi3"},    {"gemma2", "gemma"},
  };
  for (const auto& [family, template_name] : cases) {
    SCOPED_TRACE(family);
    FERRY_ASSERT_OK_AND_ASSIGN(
        OpenedModel m,
        OpenModel(absl::StrCat("models/testdata/tiny/", family, ".gguf"),
                  {cpu_.get()}));
    EXPECT_EQ(m.format, ModelFormat::kGguf);
    EXPECT_EQ(m.model->config().arch, family);
    ASSERT_TRUE(m.chat_template.has_value());
    EXPECT_EQ(m.chat_template->name(), template_name);
    FERRY_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids,
                               m.tokenizer->Encode("Hello there!"));
    EXPECT_FALSE(ids.empty());
  }
}

TEST_F(OpenModelTest, ErrorsNameThePathBeforeLoading) {
  EXPECT_THAT(OpenModel("/nonexistent/model.gguf", {cpu_.get()}),
              StatusIs(absl::StatusCode::kNotFound));
  // An architecture ferry does not run: the error names it and the file.
  gguf::testing::GgufBuilder b;
  b.SetString("general.architecture", "mamba");
  const std::string path = Write("mamba.gguf", b.Build());
  absl::StatusOr<OpenedModel> m = OpenModel(path, {cpu_.get()});
  EXPECT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("mamba"));
  EXPECT_THAT(m.status().message(), HasSubstr(path));
}

}  // namespace
}  // namespace ferry
