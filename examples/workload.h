// Requests for the inference program: read from JSON lines, or made up
// (mixed prompt and output lengths, or many short prompts with long decode),
// and results written back as JSON lines.
//
// A prompts file has one JSON object per line (blank lines are skipped):
//   {"id": "a", "tokens": [1, 2, 3], "max_new_tokens": 16,
//    "stop": [2], "temperature": 0.8, "top_k": 40, "top_p": 0.95,
//    "seed": 7, "logits_positions": [2]}
// Exactly one of "tokens", "text" and "messages" is required. "text" is
// encoded with the model's tokenizer, so it needs one; "messages" (a list
// of {"role": "system"|"user"|"assistant", "content": "..."}) is formatted
// with the model's chat template, then encoded:
//   {"messages": [{"role": "system", "content": "Be brief."},
//                 {"role": "user", "content": "Hi"}]}
// "id" defaults to the line number.
#ifndef FERRY_EXAMPLES_WORKLOAD_H_
#define FERRY_EXAMPLES_WORKLOAD_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ferry/engine/request.h"
#include "ferry/tokenizer/chat_template.h"

namespace ferry::examples {

// Encodes a prompt's "text" into token ids (the model's tokenizer).
using TextEncoder =
    std::function<absl::StatusOr<std::vector<int32_t>>(absl::string_view)>;

// Formats a prompt's "messages" as text (the model's chat template, ending
// with the header of the assistant's turn).
using ChatFormatter = std::function<absl::StatusOr<std::string>(
    absl::Span<const tokenizer::ChatMessage>)>;

// Parses JSON lines; errors name the file (`source`), the line and the
// field. Token ids are checked against n_vocab here, with the line. Without
// `encode`, a "text" or "messages" field is an error; without `chat`, a
// "messages" field is.
absl::StatusOr<std::vector<engine::Request>> ParseRequests(
    absl::string_view text, absl::string_view source, int64_t n_vocab,
    int default_max_new_tokens, const TextEncoder& encode = nullptr,
    const ChatFormatter& chat = nullptr);

// Reads and parses the file at `path`.
absl::StatusOr<std::vector<engine::Request>> ReadRequests(
    const std::string& path, int64_t n_vocab, int default_max_new_tokens,
    const TextEncoder& encode = nullptr, const ChatFormatter& chat = nullptr);

struct SyntheticWorkload {
  int requests = 16;
  int64_t min_prompt = 8, max_prompt = 64;
  int min_new = 4, max_new = 32;
  uint64_t seed = 42;
};
// Requests with lengths uniform in the given ranges and random tokens (a
// function of the seed only).
std::vector<engine::Request> MakeRequests(const SyntheticWorkload& workload,
                                          int64_t n_vocab);

// One JSON line per result: {"id", "tokens", "finish", "prompt_tokens",
// "ttft_ms", "latency_ms", "itl_ms_mean", "non_finite_logits"} plus
// "logits_rows" (position -> row of the logits dump) when given, and "text"
// (the decoded tokens) when `text` is not null.
std::string ResultToJson(
    const engine::Result& result, int64_t prompt_tokens,
    const std::vector<std::pair<int64_t, int64_t>>& logits_rows,
    const std::string* text = nullptr);

}  // namespace ferry::examples

#endif  // FERRY_EXAMPLES_WORKLOAD_H_
