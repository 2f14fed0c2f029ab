// GraphSignature: what every plan of a graph depends on, tensor by tensor.
//
// The scheduler's assignment and splits and the graph allocator's offsets
// hold for any graph with the same signature, so both reuse plans through
// this one description (ggml's graph reuse, llama.cpp #14482).
//
// Tensors are numbered once: nodes in graph order, then leafs; after Update,
// Tensor::scratch_index holds each tensor's number. Per tensor the key is
// its op, op params (of nodes that compute), dtype, shape, strides,
// descriptive flags, view offset, and the memory its owner placed (buffer,
// type and usage; memory a graph allocator placed counts as none); its
// wiring is its sources and view source as numbers (tensors outside the
// graph, which only hand-built graphs have, by identity).
//
// Update compares a graph with the signature position by position and
// rewrites only what differs, in one pass; generation() changes exactly when
// the content does, so a consumer that planned at generation g knows the
// graph still matches without comparing again.
#ifndef FERRY_ALLOC_GRAPH_SIGNATURE_H_
#define FERRY_ALLOC_GRAPH_SIGNATURE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/op.h"
#include "ferry/graph/tensor.h"

namespace ferry {

// Thread-compatible.
class GraphSignature {
 public:
  // Wiring numbers: a tensor of the graph (>= 0), none, or one outside it.
  static constexpr int32_t kNone = -1;
  static constexpr int32_t kExternal = -2;

  struct Key {
    Op op = Op::kNone;
    DType dtype = DType::kF32;
    BufferUsage usage = BufferUsage::kAny;  // Of `buffer`.
    bool preset = false;                    // Has memory its owner placed.
    uint32_t flags = 0;
    std::array<int64_t, kMaxDims> ne = {};
    std::array<int64_t, kMaxDims> nb = {};
    int64_t view_offset = 0;
    const Buffer* buffer = nullptr;  // Of preset memory (may be null).
    const BufferType* buffer_type = nullptr;
    std::array<int32_t, kMaxOpParams> op_params = {};  // If it computes.
  };
  // What planning asks of a tensor, derived from its key.
  enum Kind : uint8_t {
    kKindComputes = 1,   // An op that is not a view.
    kKindViewOp = 2,     // view, reshape, permute, transpose.
    kKindUserInput = 4,  // A leaf flagged input.
    kKindWeight = 8,     // Preset in a weights buffer, or flagged weight.
  };
  struct Wiring {
    std::array<int32_t, kMaxSrc> src = {kNone, kNone, kNone, kNone};
    int32_t view_src = kNone;
    // The tensor whose memory it uses: its view source, or itself.
    int32_t owner = kNone;
    uint8_t kind = 0;
  };

  // Describes `graph`, comparing with what the signature held.
  absl::Status Update(const Graph& graph);
  // Forgets everything (the next Update compares with nothing).
  void Clear();

  // Whether the last Update found the same content as before it, and the
  // same Tensor objects too.
  bool unchanged() const { return unchanged_; }
  bool same_tensors() const { return same_tensors_; }
  // Changes whenever the content does (never reused).
  uint64_t generation() const { return generation_; }

  size_t size() const { return tensors_.size(); }
  size_t num_nodes() const { return num_nodes_; }
  size_t num_leafs() const { return tensors_.size() - num_nodes_; }
  Tensor* tensor(size_t i) const { return tensors_[i]; }
  const Key& key(size_t i) const { return keys_[i]; }
  const Wiring& wiring(size_t i) const { return wiring_[i]; }
  bool Has(size_t i, Kind kind) const { return (wiring_[i].kind & kind) != 0; }
  // The number of `t` in this signature, or kNone.
  int32_t IndexOf(const Tensor* t) const;
  // Whether tensor i's key or wiring differed in the last Update (all of
  // them when the previous signature could not be compared).
  bool changed(size_t i) const {
    return i >= compared_end_ || changed_[i] != 0;
  }

  // Whether a tensor reads one outside the graph (hand-built graphs).
  bool has_externals() const { return !externals_.empty(); }
  // Equal content (keys and wiring, not tensor identity).
  bool SameContent(const GraphSignature& other) const;

 private:
  bool KeyMatches(size_t i, const Tensor& t, bool preset, bool computes) const;
  void WriteKey(size_t i, const Tensor& t, bool preset, bool computes);

  std::vector<Tensor*> tensors_;
  std::vector<Key> keys_;
  std::vector<Wiring> wiring_;
  // External sources, by (tensor * (kMaxSrc + 1) + slot): slot kMaxSrc is
  // the view source. Only for hand-built graphs.
  std::vector<std::pair<size_t, const Tensor*>> externals_;
  std::vector<uint8_t> changed_;
  size_t compared_end_ = 0;
  size_t num_nodes_ = 0;
  bool valid_ = false;
  bool unchanged_ = false;
  bool same_tensors_ = false;
  uint64_t generation_ = 0;
};

}  // namespace ferry

#endif  // FERRY_ALLOC_GRAPH_SIGNATURE_H_
