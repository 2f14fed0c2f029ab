// ResultsWriter: the results of pipelined_inference's main run as JSON lines
// (workload.h's ResultToJson), written and flushed as each request finishes
// so that a later failure loses none; also each answer as text and the
// logits rows for --dump_logits.
#ifndef FERRY_EXAMPLES_RESULTS_WRITER_H_
#define FERRY_EXAMPLES_RESULTS_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ferry/engine/request.h"
#include "ferry/tokenizer/tokenizer.h"

namespace ferry::examples {

// Thread-compatible: Write is called by one thread at a time.
class ResultsWriter {
 public:
  // Lines go to the file at `path` (truncated), else to stdout when
  // `to_stdout`, else nowhere (answers are still decoded). `requests` are
  // the run's, in order (their prompt lengths are reported); `tok`, if not
  // null, decodes each answer into a "text" field; `name_logits_rows`: each
  // line names the dump row of each logits position. Not owned; both must
  // outlive the writer.
  static absl::StatusOr<std::unique_ptr<ResultsWriter>> Open(
      const std::string& path, bool to_stdout,
      const std::vector<engine::Request>& requests,
      const tokenizer::Tokenizer* tok, bool name_logits_rows);
  ~ResultsWriter();
  ResultsWriter(const ResultsWriter&) = delete;
  ResultsWriter& operator=(const ResultsWriter&) = delete;

  // Writes and flushes the line of request `index`. Unavailable if the line
  // cannot be written.
  absl::Status Write(size_t index, const engine::Result& result);

  // The decoded text of request `index` ("" before its result, or with no
  // tokenizer).
  const std::string& answer(size_t index) const { return answers_[index]; }
  // The logits rows written so far ([logits_rows(), n_vocab] floats), in
  // the order the lines name them.
  const std::vector<float>& logits() const { return logits_; }
  int64_t logits_rows() const { return logits_rows_; }

 private:
  ResultsWriter(std::FILE* file, std::string name,
                const std::vector<engine::Request>& requests,
                const tokenizer::Tokenizer* tok, bool name_logits_rows);

  std::FILE* file_;  // Owned unless stdout; null: no lines.
  std::string name_;
  const std::vector<engine::Request>& requests_;
  const tokenizer::Tokenizer* tok_;
  bool name_logits_rows_;
  std::vector<std::string> answers_;
  std::vector<float> logits_;
  int64_t logits_rows_ = 0;
};

}  // namespace ferry::examples

#endif  // FERRY_EXAMPLES_RESULTS_WRITER_H_
