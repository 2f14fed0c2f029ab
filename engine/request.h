// What a caller gives the engine (Request) and gets back (Result).
#ifndef FERRY_ENGINE_REQUEST_H_
#define FERRY_ENGINE_REQUEST_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "ferry/engine/sampler.h"

namespace ferry::engine {

struct Request {
  std::string id;               // The caller's; echoed in the Result.
  std::vector<int32_t> prompt;  // Token ids; at least one.
  int max_new_tokens = 16;      // >= 1.
  // Generation ends after any of these (the stop token is kept).
  std::vector<int32_t> stop_tokens;
  SamplingParams sampling;
  // Positions (0 = the first prompt token) whose logits to return; the
  // logits at position p are the model's scores for the token at p + 1.
  // Positions past the end of the sequence are ignored.
  std::vector<int64_t> logits_positions;
  // Called with each generated token as it is sampled, on the engine's
  // thread (keep it short; it must not call the engine back).
  std::function<void(int32_t token)> on_token;
};

enum class FinishReason {
  kLength,   // max_new_tokens generated.
  kStop,     // A stop token was generated.
  kContext,  // The sequence filled its KV slot.
};

absl::string_view FinishReasonName(FinishReason reason);

struct Result {
  std::string id;
  std::vector<int32_t> tokens;  // Generated tokens (not the prompt).
  FinishReason finish = FinishReason::kLength;
  // Times on the engine's clock (EngineOptions::clock), nanoseconds.
  int64_t submitted_ns = 0;
  int64_t first_token_ns = 0;  // When tokens[0] was sampled.
  int64_t finished_ns = 0;
  std::vector<int64_t> token_ns;  // When each token was sampled.
  // (position, logits) for the Request's logits_positions, by position.
  std::vector<std::pair<int64_t, std::vector<float>>> logits;
  // NaN or infinite values seen in this request's logits rows.
  int64_t non_finite_logits = 0;
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_REQUEST_H_
