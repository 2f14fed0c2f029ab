// What llama.cpp and an exact float64 forward pass computed on a SmolLM2
// GGUF (engine/testdata/make_smollm2_reference.py writes it as JSON), and
// the comparison of an engine Result with it: the logits of every prompt
// position (the reference's top 16 per row), their argmax, and the greedy
// continuation, which may leave the reference only at a near-tie of it.
// Shared by the SmolLM2 tests of each GGUF (smollm2_test, smollm2_kquant_test).
#ifndef FERRY_ENGINE_TESTING_SMOLLM2_REFERENCE_H_
#define FERRY_ENGINE_TESTING_SMOLLM2_REFERENCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ferry/engine/request.h"

namespace ferry::engine::testing {

// Bounds per reference: the largest |ferry - reference| over the
// reference's top-16 logits of every prompt position (logits are ~10-25 in
// magnitude here), the share of positions whose argmax agrees, and the
// margin below which a greedy step counts as a tie.
struct Bounds {
  double max_abs_error;
  double min_top1_agreement;
  double tie_margin;
};

struct Reference {
  std::vector<std::vector<int32_t>> top_ids;   // Per position.
  std::vector<std::vector<float>> top_logits;  // Per position.
  std::vector<int32_t> greedy;
  std::vector<float> greedy_margin;  // Best minus second-best, per step.
};

struct ReferencePrompt {
  std::string text;
  std::vector<int32_t> tokens;
  Reference llama_cpp;
  Reference exact;
};

// Reads the JSON at `path` (relative to the test's runfiles root).
absl::StatusOr<std::vector<ReferencePrompt>> LoadReference(
    const std::string& path);

// Shortens every greedy continuation of `prompts` to at most `steps`.
void TruncateGreedy(std::vector<ReferencePrompt>& prompts, size_t steps);

struct Agreement {
  double max_err = 0;
  int rows = 0;
  int top1 = 0;
  int top1_bad = 0;      // Argmax misses where the reference's top-2 margin
                         // is at least the tie margin.
  int greedy_equal = 0;  // Continuations equal in full.
  int greedy_bad = 0;    // Continuations that left at a clear choice.
};

// Adds one prompt's comparison of `res` with `ref` to `a`; returns a line
// saying it. With `second`, the prompt's other reference: a position or
// greedy step where it sees a near-tie too (its top-2 margin below the tie
// margin, in the same context) is no clear choice, since the two
// references' own rounding already disagrees there.
std::string Compare(const Reference& ref, const Result& res,
                    const Bounds& bounds, Agreement& a,
                    const Reference* second = nullptr);

}  // namespace ferry::engine::testing

#endif  // FERRY_ENGINE_TESTING_SMOLLM2_REFERENCE_H_
