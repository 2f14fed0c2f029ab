// A llama-like transformer graph (f32, no KV cache) for allocator and
// scheduler tests and benchmarks.
//
// Per layer: rms_norm, mul by the norm weight, q/k/v mul_mat, reshape to
// heads, rope of q and k (positions input), permute, mul_mat(k, q), soft_max
// with a causal mask input and 1/sqrt(head_dim), mul_mat(v^T, kq), permute,
// cont, output mul_mat, residual add, rms_norm, mul, gate and up mul_mat,
// silu, mul, down mul_mat, residual add. Then the final norm and the output
// mul_mat: logits for all tokens, or for the last token only (a view of its
// row). Weights live in their own context, flagged kTensorFlagWeight; the
// inputs (token ids, positions, mask) are flagged kTensorFlagInput and the
// logits kTensorFlagOutput.
#ifndef FERRY_ALLOC_TESTING_LLAMA_GRAPH_H_
#define FERRY_ALLOC_TESTING_LLAMA_GRAPH_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/tensor.h"

namespace ferry::testing {

struct LlamaConfig {
  int n_layer = 8;
  int64_t n_embd = 2048;
  int64_t n_head = 16;
  int64_t n_ff = 5632;
  int64_t n_vocab = 32000;
  float eps = 1e-5f;
};

struct LlamaLayer {
  Tensor* attn_norm;
  Tensor* wq;
  Tensor* wk;
  Tensor* wv;
  Tensor* wo;
  Tensor* ffn_norm;
  Tensor* w_gate;
  Tensor* w_up;
  Tensor* w_down;
};

// Weights, metadata only until allocated (AllocateWeights, AllocateHostData
// or FakePlaceWeights).
struct LlamaModel {
  LlamaConfig config;
  Context ctx;
  Tensor* tok_embd = nullptr;  // [n_embd, n_vocab]
  std::vector<LlamaLayer> layers;
  Tensor* output_norm = nullptr;  // [n_embd]
  Tensor* output = nullptr;       // [n_embd, n_vocab]
};

// One forward pass over n_tokens tokens. Owns the activations' context.
struct LlamaGraph {
  std::unique_ptr<Context> ctx;
  Graph graph;
  Tensor* tokens = nullptr;  // i32 [n_tokens], input.
  Tensor* pos = nullptr;     // i32 [n_tokens], input.
  Tensor* mask = nullptr;    // f32 [n_tokens, n_tokens], input.
  Tensor* logits = nullptr;  // f32 [n_vocab, n_tokens or 1], output.
};

// Creates the weights of `config` (n_embd divisible by n_head, head_dim
// even).
absl::StatusOr<std::unique_ptr<LlamaModel>> MakeLlamaModel(
    const LlamaConfig& config);

// Builds the graph for `n_tokens` tokens; logits for the last token only
// when `last_token_only`.
absl::StatusOr<LlamaGraph> BuildLlamaGraph(const LlamaModel& model,
                                           int64_t n_tokens,
                                           bool last_token_only);

// Marks every tensor of `ctx` without memory as placed at a fake, aligned,
// non-null address (buffer stays null), so that graph allocators treat them
// as preset. For planning benchmarks only: the data must never be touched.
void FakePlaceWeights(Context& ctx);

// A model whose weights are placed in buffers of one type.
struct PlacedLlamaModel {
  std::unique_ptr<LlamaModel> model;
  std::vector<std::unique_ptr<Buffer>> buffers;
};

// Creates the weights of `config` in buffers of `type` and fills them with
// values that depend only on each weight's position (norm weights in
// [0.9, 1.1], matrices in [-matrix_scale, matrix_scale]), so every placement
// holds the same model.
absl::StatusOr<PlacedLlamaModel> MakePlacedLlamaModel(const LlamaConfig& config,
                                                      BufferType& type,
                                                      float matrix_scale);

// Fills the graph's inputs (host data): token ids in [0, n_vocab), positions
// 0..n-1 and a causal mask (0 on and below the diagonal, -inf above).
absl::Status FillLlamaInputs(const LlamaGraph& graph, int64_t n_vocab,
                             uint64_t seed);

}  // namespace ferry::testing

#endif  // FERRY_ALLOC_TESTING_LLAMA_GRAPH_H_
