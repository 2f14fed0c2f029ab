// LlamaKvCache: the keys and values of every layer, in cells, on the layer's
// own backend.
//
// Layer il's K and V are [kv_dim, n_cells] tensors of the cache's cell type
// (f32, or f16 at half the memory, llama.cpp's default; range_attention then
// multiplies f16 values, graph/ops.h) in a buffer of the backend that holds
// layer il's weights, so that writing and reading them never crosses
// devices. A cell holds one token's K (or V) row; which cells
// belong to which sequence is the caller's business (the engine gives each
// sequence a slot of cells), and llama_batch.h's graphs write and read cells
// named by i32 inputs.
#ifndef FERRY_MODELS_LLAMA_LLAMA_KV_CACHE_H_
#define FERRY_MODELS_LLAMA_LLAMA_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/context.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/tensor.h"
#include "ferry/models/llama/llama_model.h"

namespace ferry::llama {

// Thread-compatible. Does not own the model, which must outlive it.
class LlamaKvCache {
 public:
  // Allocates n_cells cells per layer on each layer's backend, zeroed; for a
  // model without backends (CreateUnplaced/CreateInBufferType) in
  // `unplaced_type`. Cells hold `cell_type` values: f32 or f16. Validates
  // the size and type before allocating.
  static absl::StatusOr<std::unique_ptr<LlamaKvCache>> Create(
      const LlamaModel& model, int64_t n_cells, DType cell_type = DType::kF32,
      BufferType* unplaced_type = nullptr);

  int64_t n_cells() const { return n_cells_; }
  DType cell_type() const { return cell_type_; }
  Tensor* k(int layer) const { return k_[layer]; }
  Tensor* v(int layer) const { return v_[layer]; }
  // Bytes per backend of the model (one entry when unplaced).
  const std::vector<size_t>& bytes() const { return bytes_; }
  // Zeroes every cell.
  absl::Status Clear();

 private:
  LlamaKvCache() = default;

  int64_t n_cells_ = 0;
  DType cell_type_ = DType::kF32;
  std::vector<Tensor*> k_;
  std::vector<Tensor*> v_;
  std::vector<std::unique_ptr<Context>> ctx_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<size_t> bytes_;
};

}  // namespace ferry::llama

#endif  // FERRY_MODELS_LLAMA_LLAMA_KV_CACHE_H_
