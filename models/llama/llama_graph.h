// One forward pass of a llama model over n_tokens tokens at positions
// 0..n_tokens-1, attending within them (no KV cache): the graph the
// allocator and scheduler tests and benchmarks plan, and the reference the
// engine's cached micro-batches are checked against.
//
// Per layer: rms_norm, q/k/v projections (grouped-query attention when
// n_head_kv < n_head), rope, attention with a causal mask and soft_max,
// output projection, residual, rms_norm, SiLU-gated FFN, residual; then the
// final norm and the output projection, for every token or the last one.
// Inputs (token ids, positions, mask) are flagged input, the logits output.
#ifndef FERRY_MODELS_LLAMA_LLAMA_GRAPH_H_
#define FERRY_MODELS_LLAMA_LLAMA_GRAPH_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/tensor.h"
#include "ferry/models/llama/llama_model.h"

namespace ferry::llama {

// One forward pass. Owns the activations' context.
struct LlamaGraph {
  std::unique_ptr<Context> ctx;
  Graph graph;
  int64_t n_tokens = 0;
  Tensor* tokens = nullptr;  // i32 [n_tokens], input.
  Tensor* pos = nullptr;     // i32 [n_tokens], input.
  Tensor* mask = nullptr;    // f32 [n_tokens, n_tokens], input.
  // f32 [n_tokens, n_tokens], input: the mask of sliding-window layers;
  // null without them.
  Tensor* mask_swa = nullptr;
  int64_t sliding_window = 0;  // The model's (LlamaConfig::sliding_window).
  Tensor* logits = nullptr;    // f32 [n_vocab, n_tokens or 1], output.
};

struct LlamaGraphOptions {
  int64_t n_tokens = 1;
  bool last_token_only = false;
};

absl::StatusOr<LlamaGraph> BuildLlamaGraph(const LlamaModel& model,
                                           const LlamaGraphOptions& options);

// The layer body shared by every llama graph: attention over keys and
// values the caller provides (`attend` gets q, k and v of the current
// tokens after rope, [head_dim, heads, n_tokens], and returns the keys and
// values to attend over, [head_dim, kv_heads, n_kv]), then the FFN.
namespace internal {
struct AttentionKv {
  Tensor* k = nullptr;
  Tensor* v = nullptr;
  // Set instead of k and v when the callback attended itself: [head_dim,
  // n_head, n_tokens] f32, contiguous (the body's mask is then unused).
  Tensor* out = nullptr;
};
using AttendFn = absl::StatusOr<AttentionKv> (*)(void* state, Context& ctx,
                                                 int layer, Tensor* q,
                                                 Tensor* k, Tensor* v);
// Builds the layers and the final norm; returns the normalized hidden
// state [n_embd, n_tokens]. `swa_mask` masks the sliding-window layers
// (LlamaConfig::IsSlidingLayer); it may be null when the model has none.
absl::StatusOr<Tensor*> BuildLlamaBody(const LlamaModel& model, Context& ctx,
                                       Tensor* tokens, Tensor* pos,
                                       Tensor* mask, Tensor* swa_mask,
                                       AttendFn attend, void* state);
// The logits of normalized hidden states: the output matrix, soft-capped
// when the config says so.
absl::StatusOr<Tensor*> BuildLlamaLogits(const LlamaModel& model, Context& ctx,
                                         Tensor* hidden);
}  // namespace internal

// The values of a graph's inputs for one batch: `tokens` (n_tokens ids in
// [0, n_vocab)), positions 0.., the causal mask and, when the graph has
// sliding-window layers, their mask.
struct LlamaInputs {
  std::vector<int32_t> tokens;
  std::vector<int32_t> pos;
  std::vector<float> mask;
  std::vector<float> mask_swa;
};
absl::StatusOr<LlamaInputs> MakeLlamaInputs(const LlamaGraph& graph,
                                            int64_t n_vocab,
                                            absl::Span<const int32_t> tokens);

// Writes MakeLlamaInputs's values into the graph's inputs (after the graph
// is allocated, or into host data the caller gave them).
absl::Status SetLlamaInputs(const LlamaGraph& graph, int64_t n_vocab,
                            absl::Span<const int32_t> tokens);

// Index of the largest value of each row of `logits` ([n_vocab, rows]).
std::vector<int32_t> Argmax(absl::Span<const float> logits, int64_t n_vocab);

}  // namespace ferry::llama

#endif  // FERRY_MODELS_LLAMA_LLAMA_GRAPH_H_
