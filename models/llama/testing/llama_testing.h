// Llama models and inputs for allocator and scheduler tests and benchmarks.
#ifndef FERRY_MODELS_LLAMA_TESTING_LLAMA_TESTING_H_
#define FERRY_MODELS_LLAMA_TESTING_LLAMA_TESTING_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/context.h"
#include "ferry/models/llama/llama_config.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/models/llama/llama_model.h"

namespace ferry::testing {

// The tiny model the pipeline, remote and batching tests run: 4 layers,
// n_embd 64, 4 heads on 2 K/V heads, n_ff 96, a 64-token vocabulary, and
// sequences of at most `n_ctx` tokens.
constexpr llama::LlamaConfig TinyLlamaConfig(int64_t n_ctx = 32) {
  return {.n_layer = 4,
          .n_embd = 64,
          .n_head = 4,
          .n_head_kv = 2,
          .n_ff = 96,
          .n_vocab = 64,
          .n_ctx = n_ctx};
}

// Request k's prompt of n token ids in [0, n_vocab): a fixed function of
// (k, i), different for each k.
std::vector<int32_t> TinyPrompt(int k, int64_t n, int64_t n_vocab = 64);

// Marks every tensor of `ctx` without memory as placed at a fake, aligned,
// non-null address (buffer stays null), so that graph allocators treat them
// as preset. For planning benchmarks only: the data must never be touched.
void FakePlaceWeights(Context& ctx);

// An unplaced model whose weights are fake-placed (FakePlaceWeights).
absl::StatusOr<std::unique_ptr<llama::LlamaModel>> MakeFakePlacedLlamaModel(
    const llama::LlamaConfig& config);

// A model in buffers of `type` with FillRandom(seed) values, so every
// placement holds the same model.
absl::StatusOr<std::unique_ptr<llama::LlamaModel>> MakePlacedLlamaModel(
    const llama::LlamaConfig& config, BufferType& type, uint64_t seed = 7);

// Fills the graph's inputs with random token ids in [0, n_vocab) (a function
// of `seed`), positions 0..n-1 and the causal mask.
absl::Status FillLlamaInputs(const llama::LlamaGraph& graph, int64_t n_vocab,
                             uint64_t seed);

}  // namespace ferry::testing

#endif  // FERRY_MODELS_LLAMA_TESTING_LLAMA_TESTING_H_
