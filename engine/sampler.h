// Sampler: picks the next token from a row of logits: greedy, or
// temperature with top-k and top-p (nucleus) filtering, from a seeded
// random stream of its own, so a request's tokens do not depend on which
// other requests share its micro-batches.
#ifndef FERRY_ENGINE_SAMPLER_H_
#define FERRY_ENGINE_SAMPLER_H_

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ferry::engine {

struct SamplingParams {
  // 0: greedy (the largest logit; the lowest id among equals).
  float temperature = 0.0f;
  int top_k = 0;       // Keep the k most likely tokens; 0: all.
  float top_p = 1.0f;  // Keep the smallest set with this much mass; 1: all.
  uint64_t seed = 0;

  // InvalidArgument naming the bad field.
  absl::Status Validate() const;
};

// Thread-compatible.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Returns a token id in [0, logits.size()). Non-finite logits (NaN, +-inf)
  // are never picked unless every logit is, and then the result is 0.
  int32_t Sample(absl::Span<const float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;  // Scratch.
};

// Number of NaN or infinite values in `values`.
int64_t CountNonFinite(absl::Span<const float> values);

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_SAMPLER_H_
