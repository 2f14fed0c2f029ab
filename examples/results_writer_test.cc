#include "ferry/examples/results_writer.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ferry::examples {
namespace {

using ::ferry::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

std::vector<nlohmann::json> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) {
    out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

std::vector<engine::Request> TwoRequests() {
  std::vector<engine::Request> requests(2);
  requests[0].id = "a";
  requests[0].prompt = {1, 2, 3};
  requests[1].id = "b";
  requests[1].prompt = {4};
  return requests;
}

engine::Result MakeResult(std::string id, std::vector<int32_t> tokens,
                          std::vector<int64_t> positions) {
  engine::Result r;
  r.id = std::move(id);
  r.tokens = std::move(tokens);
  for (int64_t p : positions) {
    r.logits.emplace_back(p, std::vector<float>{float(p), float(p) + 0.5f});
  }
  return r;
}

TEST(ResultsWriterTest, EachLineIsOnDiskBeforeTheNextResult) {
  const std::string path = TempPath("streamed.jsonl");
  const std::vector<engine::Request> requests = TwoRequests();
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto writer, ResultsWriter::Open(path, false, requests, nullptr, true));
  // Results come in the order requests finish, not the file's.
  FERRY_ASSERT_OK(writer->Write(1, MakeResult("b", {7}, {0})));
  std::vector<nlohmann::json> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 1u);  // Flushed, the writer still open.
  EXPECT_EQ(lines[0]["id"], "b");
  EXPECT_EQ(lines[0]["prompt_tokens"], 1);
  EXPECT_EQ(lines[0]["logits_rows"], nlohmann::json({{"0", 0}}));
  EXPECT_FALSE(lines[0].contains("text"));  // No tokenizer.

  FERRY_ASSERT_OK(writer->Write(0, MakeResult("a", {5, 6}, {1, 2})));
  lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["id"], "a");
  EXPECT_EQ(lines[1]["prompt_tokens"], 3);
  EXPECT_EQ(lines[1]["tokens"], nlohmann::json({5, 6}));
  EXPECT_EQ(lines[1]["logits_rows"], nlohmann::json({{"1", 1}, {"2", 2}}));
  EXPECT_EQ(writer->logits_rows(), 3);
  EXPECT_THAT(writer->logits(), ElementsAre(0, 0.5, 1, 1.5, 2, 2.5));
}

TEST(ResultsWriterTest, RowsUnnamedWithoutALogitsDump) {
  const std::string path = TempPath("unnamed.jsonl");
  const std::vector<engine::Request> requests = TwoRequests();
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto writer, ResultsWriter::Open(path, false, requests, nullptr, false));
  FERRY_ASSERT_OK(writer->Write(0, MakeResult("a", {5}, {1})));
  const std::vector<nlohmann::json> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_FALSE(lines[0].contains("logits_rows"));
}

TEST(ResultsWriterTest, UnwritableFilesAreErrors) {
  const std::vector<engine::Request> requests = TwoRequests();
  EXPECT_THAT(ResultsWriter::Open(TempPath("no/such/dir/r.jsonl"), false,
                                  requests, nullptr, false)
                  .status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("--output=")));
  // A full disk fails the write that did not reach it, naming the file.
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto full,
      ResultsWriter::Open("/dev/full", false, requests, nullptr, false));
  EXPECT_THAT(full->Write(0, MakeResult("a", {5}, {})),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("/dev/full")));
}

TEST(ResultsWriterTest, NoFileStillKeepsAnswers) {
  const std::vector<engine::Request> requests = TwoRequests();
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto writer, ResultsWriter::Open("", false, requests, nullptr, true));
  FERRY_ASSERT_OK(writer->Write(0, MakeResult("a", {5}, {1})));
  EXPECT_EQ(writer->answer(0), "");
  EXPECT_EQ(writer->logits_rows(), 0);
}

}  // namespace
}  // namespace ferry::examples
