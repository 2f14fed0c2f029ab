// NodeSnapshot: the metadata of nodes to compute, copied when they are
// enqueued (rule 1 of backend.h), so the caller's Tensor objects may change
// or go away while the work waits to run.
//
// Each node and each tensor it reads is copied once (without its name),
// sources rewired to the copies, and its data pointer replaced by what the
// backend's `locate` returns for it: the host address for the CPU, the
// engine-side alias for the simulated device. `locate` also validates
// placement, so a node whose source is unplaced or in another device's
// memory is a status, never a crash.
#ifndef FERRY_BACKENDS_NODE_SNAPSHOT_H_
#define FERRY_BACKENDS_NODE_SNAPSHOT_H_

#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/graph/tensor.h"

namespace ferry {

// Thread-compatible. Owns the copies; move it to where the work runs.
class NodeSnapshot {
 public:
  // Returns where the data of `tensor` is for the kernels, or why it cannot
  // be used (unplaced, wrong memory, out of its buffer).
  using Locate = absl::FunctionRef<absl::StatusOr<void*>(const Tensor& tensor)>;

  // Copies the nodes of `nodes` that compute (view ops and leafs are only
  // read as sources) and what they read. Errors name the node or source.
  static absl::StatusOr<NodeSnapshot> Make(absl::Span<Tensor* const> nodes,
                                           Locate locate);

  NodeSnapshot(NodeSnapshot&&) = default;
  NodeSnapshot& operator=(NodeSnapshot&&) = default;

  // The copied nodes, in order.
  absl::Span<Tensor* const> nodes() const { return nodes_; }
  size_t size() const { return nodes_.size(); }

 private:
  NodeSnapshot() = default;

  std::vector<Tensor> copies_;  // Reserved up front: stable addresses.
  std::vector<Tensor*> nodes_;
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_NODE_SNAPSHOT_H_
