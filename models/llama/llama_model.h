// A llama-style decoder-only transformer on ferry's graph/, with its layers
// placed across backends and a KV cache in backend buffers.
//
// LlamaModel::Create makes the weights of a LlamaConfig and places them:
// layer il goes to a backend chosen by the split proportions (contiguous
// runs of layers, as llama.cpp's --tensor-split does with layers), and each
// backend gets one weights buffer (BufferUsage::kWeights) holding the
// weights of its layers; the token embedding lives on the CPU (the last
// backend), the output norm and output matrix with the last layer. The KV
// cache of a layer ([head_dim * n_head_kv, n_ctx] f32 for K and for V) lives
// in a buffer of the same backend.
//
// BuildLlamaGraph builds the forward pass for n_tokens tokens at positions
// n_past.. (prefill when n_past is 0, a generation step when n_tokens is 1):
// rms_norm, q/k/v projections (grouped-query attention when n_head_kv <
// n_head), rope, attention with a causal mask and soft_max, output
// projection, residual, rms_norm, SiLU-gated FFN, residual; then the final
// norm and the output projection. With the KV cache, the new K and V rows
// are written by cpy into a view of the cache at n_past, and attention runs
// over the cached rows [0, n_past) concatenated with the current ones (the
// write and the read touch disjoint rows, so no ordering edge is needed
// between them inside one graph).
#ifndef FERRY_EXAMPLES_LLAMA_MODEL_H_
#define FERRY_EXAMPLES_LLAMA_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/tensor.h"

namespace ferry::examples {

struct LlamaConfig {
  int n_layer = 4;
  int64_t n_embd = 256;
  int64_t n_head = 8;
  int64_t n_head_kv = 4;
  int64_t n_ff = 704;
  int64_t n_vocab = 4096;
  int64_t n_ctx = 512;
  float eps = 1e-5f;

  int64_t head_dim() const { return n_embd / n_head; }
  int64_t kv_dim() const { return head_dim() * n_head_kv; }
  // InvalidArgument naming the first bad field.
  absl::Status Validate() const;
  // Parameters (weights only).
  int64_t NumParams() const;
  std::string ToString() const;
};

struct LlamaLayer {
  Tensor* attn_norm = nullptr;  // [n_embd]
  Tensor* wq = nullptr;         // [n_embd, n_embd]
  Tensor* wk = nullptr;         // [n_embd, kv_dim]
  Tensor* wv = nullptr;         // [n_embd, kv_dim]
  Tensor* wo = nullptr;         // [n_embd, n_embd]
  Tensor* ffn_norm = nullptr;   // [n_embd]
  Tensor* w_gate = nullptr;     // [n_embd, n_ff]
  Tensor* w_up = nullptr;       // [n_embd, n_ff]
  Tensor* w_down = nullptr;     // [n_ff, n_embd]
  Tensor* k_cache = nullptr;    // [kv_dim, n_ctx], null without a cache.
  Tensor* v_cache = nullptr;
  int backend = 0;  // Index into LlamaModel::backends().
};

struct LlamaModelOptions {
  // Proportions of layers per backend (same length as the backend list);
  // empty: equal shares for every backend but the CPU, or everything on the
  // CPU when it is the only one.
  std::vector<double> split;
  // The backend of each layer (indices into the backend list), in place of
  // `split` (e.g. {0, 0, 2, 1, 1}: a layer on the CPU between two devices).
  std::vector<int> layer_backends;
  // Where the token embedding and the output norm and matrix live; -1: the
  // CPU and the last layer's backend.
  int embedding_backend = -1;
  int output_backend = -1;
  // Memory of the weights the CPU holds; nullptr: the CPU's own (pageable).
  // A device's host_buffer_type() gives pinned weights.
  BufferType* cpu_weights_type = nullptr;
  bool kv_cache = true;
};

// Thread-compatible. Owns the weights' metadata and buffers.
class LlamaModel {
 public:
  // `backends` in the scheduler's order (the last is the CPU); not owned.
  // Nothing stays allocated on error.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Create(
      const LlamaConfig& config, std::vector<Backend*> backends,
      const LlamaModelOptions& options = {});

  const LlamaConfig& config() const { return config_; }
  const std::vector<Backend*>& backends() const { return backends_; }
  const std::vector<LlamaLayer>& layers() const { return layers_; }
  Tensor* tok_embd() const { return tok_embd_; }
  Tensor* output_norm() const { return output_norm_; }
  Tensor* output() const { return output_; }
  int embedding_backend() const { return embedding_backend_; }
  int output_backend() const { return output_backend_; }
  bool has_kv_cache() const { return !layers_.empty() && layers_[0].k_cache; }

  // Every weight (not the KV cache), in file order.
  std::vector<Tensor*> Weights() const;
  // Bytes of weights and of KV cache per backend.
  const std::vector<size_t>& weight_bytes() const { return weight_bytes_; }
  const std::vector<size_t>& cache_bytes() const { return cache_bytes_; }
  // "sim0: layers 0-1 (3.1 MiB)\n..." per backend.
  std::string DescribePlacement() const;

  // Fills every weight with deterministic random values (a function of the
  // seed and the tensor's name only) and clears the KV cache.
  absl::Status FillRandom(uint64_t seed);
  absl::Status ClearKvCache();

 private:
  LlamaModel() = default;

  LlamaConfig config_;
  std::vector<Backend*> backends_;
  std::vector<LlamaLayer> layers_;
  Tensor* tok_embd_ = nullptr;
  Tensor* output_norm_ = nullptr;
  Tensor* output_ = nullptr;
  int embedding_backend_ = 0;
  int output_backend_ = 0;
  // Per backend: the weights' and the cache's metadata, and their buffers.
  std::vector<std::unique_ptr<Context>> weight_ctx_;
  std::vector<std::unique_ptr<Context>> cache_ctx_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<size_t> weight_bytes_;
  std::vector<size_t> cache_bytes_;
};

// Random values for the weight called `name`: norms near 1, matrices small
// (keeps activations well scaled). Used by FillRandom and by the weights
// file writer, so a file and FillRandom with one seed hold the same model.
void RandomWeightValues(const std::string& name, int64_t ne1, uint64_t seed,
                        absl::Span<float> out);

// One forward pass. Owns the activations' context.
struct LlamaGraph {
  std::unique_ptr<Context> ctx;
  Graph graph;
  int64_t n_tokens = 0;
  int64_t n_past = 0;
  Tensor* tokens = nullptr;  // i32 [n_tokens], input.
  Tensor* pos = nullptr;     // i32 [n_tokens], input.
  Tensor* mask = nullptr;    // f32 [n_past + n_tokens, n_tokens], input.
  Tensor* logits = nullptr;  // f32 [n_vocab, n_tokens or 1], output.
};

struct LlamaGraphOptions {
  int64_t n_tokens = 1;
  int64_t n_past = 0;
  // Write K/V into the cache and attend over it (needs a model with one).
  bool use_kv_cache = false;
  bool last_token_only = false;
};

absl::StatusOr<LlamaGraph> BuildLlamaGraph(const LlamaModel& model,
                                           const LlamaGraphOptions& options);

// The values of a graph's inputs for one batch: `tokens` (n_tokens ids in
// [0, n_vocab)), positions n_past.. and the causal mask.
struct LlamaInputs {
  std::vector<int32_t> tokens;
  std::vector<int32_t> pos;
  std::vector<float> mask;
};
absl::StatusOr<LlamaInputs> MakeLlamaInputs(const LlamaGraph& graph,
                                            int64_t n_vocab,
                                            absl::Span<const int32_t> tokens);

// Writes MakeLlamaInputs's values into the graph's inputs (after the graph
// is allocated).
absl::Status SetLlamaInputs(const LlamaGraph& graph, int64_t n_vocab,
                            absl::Span<const int32_t> tokens);

// Index of the largest value of each row of `logits` ([n_vocab, rows]).
std::vector<int32_t> Argmax(absl::Span<const float> logits, int64_t n_vocab);

}  // namespace ferry::examples

#endif  // FERRY_EXAMPLES_LLAMA_MODEL_H_
