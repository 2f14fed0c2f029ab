#include "ferry/sched/slot_nodes.h"

namespace ferry {

void SlotNodes::Build(const GraphSignature& signature,
                      const Partition& partition, CopySlots& slots) {
  const int n_copies = slots.n_copies();
  size_t n_clones = 0;
  const std::vector<Rewire>& rewires = partition.rewires;
  for (size_t r = 0; r < rewires.size(); ++r) {
    // Rewires are in node order, so a node's rewires are adjacent.
    if (r == 0 || rewires[r].node != rewires[r - 1].node) ++n_clones;
  }
  // Resized, not reassigned: every field a clone uses is set below.
  clones_.resize(n_clones * n_copies);
  std::vector<Tensor*>& clone_of = clone_of_;
  clone_of.assign(signature.num_nodes() * n_copies, nullptr);
  size_t next_clone = 0;
  for (int c = 0; c < n_copies; ++c) {
    for (const Rewire& rw : rewires) {
      Tensor*& clone = clone_of[static_cast<size_t>(rw.node) * n_copies + c];
      if (clone == nullptr) {
        clone = &clones_[next_clone++];
        const Tensor& node = *signature.tensor(rw.node);
        clone->dtype = node.dtype;
        clone->ne = node.ne;
        clone->nb = node.nb;
        clone->op = node.op;
        clone->op_params = node.op_params;
        clone->src = node.src;
        clone->view_src = node.view_src;
        clone->view_offset = node.view_offset;
        clone->flags = node.flags;
        clone->buffer = node.buffer;
        clone->data = node.data;
        clone->name = node.name;
        clone->scratch_index = rw.node;
      }
      clone->src[rw.src] = slots.copy(rw.copy, c);
    }
  }
  nodes_.resize(n_copies);
  for (auto& nodes : nodes_) nodes.clear();
  ranges_.clear();
  for (const Split& split : partition.splits) {
    const int begin = static_cast<int>(nodes_[0].size());
    for (int c = 0; c < n_copies; ++c) {
      for (int k = split.first_node; k < split.end_node; ++k) {
        if (!signature.Has(k, GraphSignature::kKindComputes)) continue;
        Tensor* clone = clone_of[static_cast<size_t>(k) * n_copies + c];
        nodes_[c].push_back(clone != nullptr ? clone : signature.tensor(k));
      }
    }
    ranges_.emplace_back(begin, static_cast<int>(nodes_[0].size()));
  }
}

void SlotNodes::RefreshMemory(const GraphSignature& signature) {
  if (clones_.empty()) return;
  for (Tensor& clone : clones_) {
    const Tensor& original = *signature.tensor(clone.scratch_index);
    clone.buffer = original.buffer;
    clone.data = original.data;
  }
}

}  // namespace ferry
