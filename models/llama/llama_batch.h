// The fixed-shape micro-batch graph the engine runs: tokens of several
// sequences (prefill chunks and decode tokens together) over a KV cache.
//
// Every micro-batch of one graph has the same shape (n_tokens, n_window,
// n_outputs), so the scheduler plans it once and keeps several in flight
// (the engine keeps graphs of a few shapes, buckets, and narrows a batch to
// the smallest that holds it: LlamaBatchBuilder::Narrow); what varies is
// data, given as inputs:
//   tokens, pos   [n_tokens] i32: token ids and their positions;
//   kv_dst        [n_tokens] i32: the cache cell each token's K/V goes to
//                 (set_rows into every layer's cache);
//   kv_window     [n_window] i32: the cells attended to (get_rows of the
//                 written cache), the cells of this batch's sequences;
//   mask          [n_window, n_tokens] f32: 0 where token t may see window
//                 entry w (same sequence, position <= its own), else -inf;
//   out_rows      [n_outputs] i32: the tokens whose logits come out.
// With attend_by_ranges (CanAttendByRanges) the graph has no kv_window and
// no mask: each token attends in place over its sequence's cells, given as
//   kv_ranges     [2, n_tokens] i32: cache cells [begin, end) of token t
//                 (its sequence's cells up to its position, which must be
//                 consecutive cells; padding's: the scratch cell),
// with range_attention (graph/ops.h), so a token reads its own sequence's
// cells only and n_window merely bounds the cells a batch may span.
// The output is logits [n_vocab, n_outputs]. Unused token slots are padding:
// their kv_dst is -1, so they write no cell (set_rows skips it; several
// padding rows writing one cell would race), and they see only the last
// window entry, a scratch cell LlamaBatchBuilder keeps for them (zero, as the
// cache was cleared), so no row of soft_max is fully masked.
#ifndef FERRY_MODELS_LLAMA_LLAMA_BATCH_H_
#define FERRY_MODELS_LLAMA_LLAMA_BATCH_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/graph/context.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/tensor.h"
#include "ferry/models/llama/llama_kv_cache.h"
#include "ferry/models/llama/llama_model.h"

namespace ferry::llama {

struct LlamaBatchShape {
  int64_t n_tokens = 16;
  int64_t n_window = 256;  // >= 2: the last entry is padding's.
  int64_t n_outputs = 16;  // In [1, n_tokens].
  // range_attention over kv_ranges instead of a gathered, masked window.
  bool attend_by_ranges = false;

  absl::Status Validate() const;
};

// One micro-batch graph. Owns the activations' context.
struct LlamaBatchGraph {
  std::unique_ptr<Context> ctx;
  Graph graph;
  LlamaBatchShape shape;
  Tensor* tokens = nullptr;
  Tensor* pos = nullptr;
  Tensor* kv_dst = nullptr;
  Tensor* kv_window = nullptr;  // Null with attend_by_ranges.
  Tensor* mask = nullptr;       // Null with attend_by_ranges.
  Tensor* kv_ranges = nullptr;  // Only with attend_by_ranges.
  Tensor* out_rows = nullptr;
  Tensor* logits = nullptr;  // f32 [n_vocab, n_outputs], output.
};

// Whether `model`'s batch graph can attend by ranges: its layers attend over
// their whole context (no sliding window shorter than n_ctx) without
// soft-capping, and each of its backends' devices runs range_attention on
// a cache of `cache_type` cells.
bool CanAttendByRanges(const LlamaModel& model, DType cache_type = DType::kF32);

// Builds the graph over `cache` (which must hold at least 2 cells: the last
// is padding's scratch cell).
absl::StatusOr<LlamaBatchGraph> BuildLlamaBatchGraph(
    const LlamaModel& model, const LlamaKvCache& cache,
    const LlamaBatchShape& shape);

// The input values of one micro-batch, built sequence by sequence.
// Thread-compatible.
class LlamaBatchBuilder {
 public:
  // `pad_cell`: the scratch cell padding attends to (no sequence's; never
  // written).
  LlamaBatchBuilder(const LlamaBatchShape& shape, int32_t pad_cell);

  // Starts an empty batch (all padding).
  void Clear();
  // The shape the values are laid out for: the constructor's, or the one
  // Narrow chose since the last Clear.
  const LlamaBatchShape& shape() const { return shape_; }
  int64_t tokens_used() const { return n_tokens_; }
  int64_t tokens_left() const { return shape_.n_tokens - n_tokens_; }
  // Window entries the sequences added so far attend over.
  int64_t window_used() const { return n_window_; }
  // Window entries left for sequences (the last one is padding's).
  int64_t window_left() const { return shape_.n_window - 1 - n_window_; }
  int64_t outputs_used() const { return n_outputs_; }
  int64_t outputs_left() const { return shape_.n_outputs - n_outputs_; }
  bool empty() const { return n_tokens_ == 0; }

  // Adds `tokens` of one sequence at positions first_pos.., where cells[p]
  // is the cache cell of position p for every p < first_pos + tokens.size()
  // (the cells already written and those these tokens write). The sequence
  // sees its own cells only, causally. `logits_at` lists indices into
  // `tokens` whose logits are wanted; returns their rows in the logits
  // output, in order. OutOfRange when the batch lacks tokens, window
  // entries or outputs for it; InvalidArgument with attend_by_ranges when
  // the cells are not consecutive (nothing is added then).
  absl::StatusOr<std::vector<int>> Add(absl::Span<const int32_t> tokens,
                                       int64_t first_pos,
                                       absl::Span<const int32_t> cells,
                                       absl::Span<const int> logits_at);

  // Lays the batch out for a graph of a smaller shape `to` (a bucket: fewer
  // token slots, outputs or window entries) that still holds what was
  // added: the tokens, outputs and the sequences' window entries stay where
  // they are, padding's entry becomes the new last one, and the unused
  // slots and entries between are dropped. InvalidArgument unless
  // tokens_used() <= to.n_tokens, outputs used <= to.n_outputs and
  // window_used() + 1 <= to.n_window, none above shape()'s. Clear() goes
  // back to the constructor's shape.
  absl::Status Narrow(const LlamaBatchShape& to);

  // The values, sized for the graph's inputs (of shape()).
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<int32_t>& pos() const { return pos_; }
  const std::vector<int32_t>& kv_dst() const { return kv_dst_; }
  const std::vector<int32_t>& kv_window() const { return kv_window_; }
  const std::vector<float>& mask() const { return mask_; }  // Else empty.
  const std::vector<int32_t>& kv_ranges() const { return kv_ranges_; }
  const std::vector<int32_t>& out_rows() const { return out_rows_; }

 private:
  LlamaBatchShape shape_;
  LlamaBatchShape full_shape_;  // The constructor's.
  int32_t pad_cell_;
  int64_t n_tokens_ = 0;
  int64_t n_window_ = 0;
  int64_t n_outputs_ = 0;
  std::vector<int32_t> tokens_, pos_, kv_dst_, kv_window_, kv_ranges_,
      out_rows_;
  std::vector<float> mask_;
};

}  // namespace ferry::llama

#endif  // FERRY_MODELS_LLAMA_LLAMA_BATCH_H_
