// LlamaModel: the weights of a llama-style transformer (llama_config.h),
// placed across backends.
//
// LlamaModel::Create makes the weights of a LlamaConfig and places them:
// layer il goes to a backend chosen by the split proportions (contiguous
// runs of layers, as llama.cpp's --tensor-split does with layers; or runs of
// weight bytes, cut inside a layer where a share ends: SplitUnit), and each
// backend gets one weights buffer (BufferUsage::kWeights) holding the
// weights of its layers; the token embedding lives on the CPU (the last
// backend), the output norm and output matrix with the last layer.
// CreateUnplaced (metadata only, for planners) and CreateInBufferType (every
// weight in one buffer type, for tests) make the same tensors.
//
// Weights carry canonical names ("tok_embd", "blk.3.attn_q", "output");
// a loader for another layout (GGUF, Hugging Face safetensors) maps its
// names onto them and fills the tensors (FindWeight, SetTensorData). The
// graphs are in llama_graph.h (one forward pass) and llama_batch.h (the
// fixed-shape micro-batch over a KV cache that the engine runs).
#ifndef FERRY_MODELS_LLAMA_LLAMA_MODEL_H_
#define FERRY_MODELS_LLAMA_LLAMA_MODEL_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/tensor.h"
#include "ferry/models/llama/llama_config.h"

namespace ferry::llama {

// A layer's weights; those the config's block lacks are null.
struct LlamaLayer {
  Tensor* attn_norm = nullptr;  // [n_embd]
  Tensor* wq = nullptr;         // [n_embd, q_dim]; null when fused_qkv
  Tensor* wk = nullptr;         // [n_embd, kv_dim]; null when fused_qkv
  Tensor* wv = nullptr;         // [n_embd, kv_dim]; null when fused_qkv
  Tensor* wqkv = nullptr;       // [n_embd, q_dim + 2 kv_dim]: fused_qkv
  Tensor* bq = nullptr;         // [q_dim]: attn_bias
  Tensor* bk = nullptr;         // [kv_dim]: attn_bias
  Tensor* bv = nullptr;         // [kv_dim]: attn_bias
  Tensor* q_norm = nullptr;     // [head_dim]: qk_norm
  Tensor* k_norm = nullptr;     // [head_dim]: qk_norm
  // [head_dim / 2]: the llama-3 rope frequency divisors (rope_scaling),
  // one copy per layer so that it lives with the layer's attention.
  Tensor* rope_freqs = nullptr;
  Tensor* wo = nullptr;              // [q_dim, n_embd]
  Tensor* attn_post_norm = nullptr;  // [n_embd]: post_norms
  Tensor* ffn_norm = nullptr;        // [n_embd]
  Tensor* w_gate = nullptr;          // [n_embd, n_ff]; null when fused_gate_up
  // [n_embd, n_ff], or [n_embd, 2 n_ff] (gate rows, then up) when
  // fused_gate_up.
  Tensor* w_up = nullptr;
  Tensor* w_down = nullptr;         // [n_ff, n_embd]
  Tensor* ffn_post_norm = nullptr;  // [n_embd]: post_norms
  // Index into LlamaModel::backends() (0 when unplaced) of the layer's
  // attention: its norm and Q/K/V projections, so its K and V cache too.
  // Under SplitUnit::kWeightBytes the rest of the layer may be on the next
  // backends (LlamaModel::WeightBackends says where each weight is).
  int backend = 0;
};

// What a split's proportions count.
enum class SplitUnit {
  // Whole layers, as llama.cpp's --tensor-split; the output matrix goes
  // with the last layer, uncounted.
  kLayers,
  // Parameters: the layers' weights and then the output norm and matrix,
  // in the order the forward pass reads them, cut where each backend's
  // share ends. A cut may fall inside a layer: after its Q/K/V
  // projections, after attn_output, or between its feed-forward matrices.
  // Pipeline stages then balance even where the layers do not divide
  // evenly or the output matrix weighs as much as a layer; what crosses a
  // cut inside a layer is a few activations per token.
  kWeightBytes,
};

struct LlamaModelOptions {
  // Proportions of layers per backend (same length as the backend list);
  // empty: equal shares for every backend but the CPU, or everything on the
  // CPU when it is the only one.
  std::vector<double> split;
  SplitUnit split_unit = SplitUnit::kLayers;
  // The backend of each layer (indices into the backend list), in place of
  // `split` (e.g. {0, 0, 2, 1, 1}: a layer on the CPU between two devices).
  std::vector<int> layer_backends;
  // Where the token embedding and the output norm and matrix live; -1: the
  // CPU and the last layer's backend (under kWeightBytes: where the split's
  // share of the output matrix falls, the last backend with a share).
  int embedding_backend = -1;
  int output_backend = -1;
  // Memory of the weights the CPU holds; nullptr: the CPU's
  // weights_buffer_type() (matrices in the GEMM's panels, packed once when
  // loaded). The CPU's default_buffer_type() keeps them row-major in
  // pageable memory; a device's host_buffer_type() gives pinned weights.
  // Every other backend's weights go in its device's weights_buffer_type().
  // An untied token embedding is packed with the rest: get_rows then
  // gathers a row from panels (a cache line per element), small next to
  // the matrices' traffic.
  BufferType* cpu_weights_type = nullptr;
  // The dtype of each weight, from its canonical name and the device that
  // holds it (a loader keeps a file's quantized blocks where that device
  // computes on them); null: f32 for every weight.
  std::function<DType(const std::string& name, const Device& device)>
      weight_dtype;
};

// Thread-compatible. Owns the weights' metadata and buffers.
class LlamaModel {
 public:
  // `backends` in the scheduler's order (the last is the CPU); not owned.
  // Nothing stays allocated on error.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Create(
      const LlamaConfig& config, std::vector<Backend*> backends,
      const LlamaModelOptions& options = {});
  // Every weight in one context without memory (backends() is empty): for
  // planning and allocator tests and benchmarks.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> CreateUnplaced(
      const LlamaConfig& config);
  // Every weight in buffers of `type` (backends() is empty).
  static absl::StatusOr<std::unique_ptr<LlamaModel>> CreateInBufferType(
      const LlamaConfig& config, BufferType& type);

  const LlamaConfig& config() const { return config_; }
  const std::vector<Backend*>& backends() const { return backends_; }
  const std::vector<LlamaLayer>& layers() const { return layers_; }
  Tensor* tok_embd() const { return tok_embd_; }
  Tensor* output_norm() const { return output_norm_; }
  // The output matrix: tok_embd() when the config ties them.
  Tensor* output() const { return output_; }
  int embedding_backend() const { return embedding_backend_; }
  int output_backend() const { return output_backend_; }

  // Every weight once, in file order.
  std::vector<Tensor*> Weights() const;
  // Every weight once with the index of the backend holding it (empty when
  // unplaced). Schedulers pin them (Scheduler::SetTensorBackend): backends
  // of one device share its weights' buffer type, and only the pins say
  // which stage holds which layers.
  std::vector<std::pair<Tensor*, int>> WeightBackends() const;
  // The weight called `name`, or nullptr.
  Tensor* FindWeight(absl::string_view name) const;
  // The contexts holding the weights (one per backend; one when unplaced).
  const std::vector<std::unique_ptr<Context>>& weight_contexts() const {
    return weight_ctx_;
  }
  // Bytes of weights per backend.
  const std::vector<size_t>& weight_bytes() const { return weight_bytes_; }
  // "sim0: layers 0-1 (3.1 MiB)\n..." per backend.
  std::string DescribePlacement() const;

  // Fills every weight with deterministic random values (a function of the
  // seed and the tensor's name only). Every weight must be f32.
  absl::Status FillRandom(uint64_t seed);

 private:
  LlamaModel() = default;
  // A layer's weights in the order the forward pass reads them, in the
  // pieces a split keeps together (kLayerPieces of them).
  static constexpr int kLayerPieces = 5;
  using LayerPlacement = std::array<int, kLayerPieces>;
  // Makes the tensors, piece p of layer il in
  // weight_ctx_[layer_placement[il][p]].
  absl::Status MakeTensors(const std::vector<LayerPlacement>& layer_placement,
                           int embedding, int output,
                           const LlamaModelOptions& options = {});

  LlamaConfig config_;
  std::vector<Backend*> backends_;
  std::vector<LlamaLayer> layers_;
  Tensor* tok_embd_ = nullptr;
  Tensor* output_norm_ = nullptr;
  Tensor* output_ = nullptr;
  int embedding_backend_ = 0;
  int output_backend_ = 0;
  // Every weight once, in file order, with the index of its backend.
  std::vector<std::pair<Tensor*, int>> weight_backends_;
  // Per backend: the weights' metadata and their buffers.
  std::vector<std::unique_ptr<Context>> weight_ctx_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<size_t> weight_bytes_;
};

// Random values for the weight called `name`: norms near 1, matrices small
// (keeps activations well scaled). Used by FillRandom and by the weights
// file writer, so a file and FillRandom with one seed hold the same model.
void RandomWeightValues(const std::string& name, int64_t ne1, uint64_t seed,
                        absl::Span<float> out);

}  // namespace ferry::llama

#endif  // FERRY_MODELS_LLAMA_LLAMA_MODEL_H_
