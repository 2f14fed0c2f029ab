#include "ferry/examples/results_writer.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ferry/examples/workload.h"
#include "ferry/tokenizer/stream_decoder.h"

namespace ferry::examples {

absl::StatusOr<std::unique_ptr<ResultsWriter>> ResultsWriter::Open(
    const std::string& path, bool to_stdout,
    const std::vector<engine::Request>& requests,
    const tokenizer::Tokenizer* tok, bool name_logits_rows) {
  std::FILE* file = nullptr;
  if (!path.empty()) {
    file = std::fopen(path.c_str(), "w");
    if (file == nullptr) {
      return absl::UnavailableError(absl::StrCat(
          "--output=", path, ": cannot write: ", std::strerror(errno)));
    }
  } else if (to_stdout) {
    file = stdout;
  }
  return std::unique_ptr<ResultsWriter>(new ResultsWriter(
      file, path.empty() ? "stdout" : path, requests, tok, name_logits_rows));
}

ResultsWriter::ResultsWriter(std::FILE* file, std::string name,
                             const std::vector<engine::Request>& requests,
                             const tokenizer::Tokenizer* tok,
                             bool name_logits_rows)
    : file_(file),
      name_(std::move(name)),
      requests_(requests),
      tok_(tok),
      name_logits_rows_(name_logits_rows),
      answers_(requests.size()) {}

ResultsWriter::~ResultsWriter() {
  if (file_ != nullptr && file_ != stdout) std::fclose(file_);
}

absl::Status ResultsWriter::Write(size_t index, const engine::Result& res) {
  // Tokens to text a token at a time, as a stream would: a character cut
  // across tokens comes out whole, once its last byte arrives.
  std::string text;
  if (tok_ != nullptr) {
    tokenizer::StreamDecoder decoder(*tok_, {.skip_special = true});
    for (int32_t t : res.tokens) text += decoder.Push(t);
    text += decoder.Finish();
  }
  answers_[index] = text;
  if (file_ == nullptr) return absl::OkStatus();
  std::vector<std::pair<int64_t, int64_t>> rows;
  for (const auto& [pos, logits] : res.logits) {
    rows.emplace_back(pos, logits_rows_++);
    logits_.insert(logits_.end(), logits.begin(), logits.end());
  }
  if (!name_logits_rows_) rows.clear();
  const std::string line = absl::StrCat(
      ResultToJson(res, static_cast<int64_t>(requests_[index].prompt.size()),
                   rows, tok_ != nullptr ? &text : nullptr),
      "\n");
  if (std::fputs(line.c_str(), file_) < 0 || std::fflush(file_) != 0) {
    return absl::UnavailableError(
        absl::StrCat("writing results to ", name_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace ferry::examples
