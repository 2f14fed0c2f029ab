// SlotNodes: the nodes each copy slot computes. A node that reads a split
// input reads it through its slot's copy, so for every slot it is replaced
// by a clone whose source is that copy (the clone shares the node's memory);
// every other node is the graph's own.
#ifndef FERRY_SCHED_SLOT_NODES_H_
#define FERRY_SCHED_SLOT_NODES_H_

#include <utility>
#include <vector>

#include "ferry/alloc/graph_signature.h"
#include "ferry/backends/backend.h"
#include "ferry/graph/tensor.h"
#include "ferry/sched/copy_slots.h"
#include "ferry/sched/partition.h"

namespace ferry {

// Thread-compatible.
class SlotNodes {
 public:
  // Builds the lists of `partition`'s splits over `signature`'s tensors,
  // reading the copies of `slots` (placed already).
  void Build(const GraphSignature& signature, const Partition& partition,
             CopySlots& slots);
  // Points the clones at their nodes' memory (after the graph is placed).
  void RefreshMemory(const GraphSignature& signature);
  // The nodes split `split` computes in slot `slot`.
  NodeSpan nodes(int split, int slot) const {
    const auto& [begin, end] = ranges_[split];
    return NodeSpan(nodes_[slot].data() + begin, end - begin);
  }

 private:
  std::vector<std::vector<Tensor*>> nodes_;  // Per slot.
  std::vector<std::pair<int, int>> ranges_;  // Per split, into each list.
  std::vector<Tensor> clones_;
  std::vector<Tensor*> clone_of_;  // Scratch, kept for its capacity.
};

}  // namespace ferry

#endif  // FERRY_SCHED_SLOT_NODES_H_
