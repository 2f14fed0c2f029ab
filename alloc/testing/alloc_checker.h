// A checker for allocated graphs, written independently of the allocator.
//
// CheckGraphAllocation verifies, for a graph whose tensors have been placed:
//   (a) every tensor has memory; every tensor in a buffer lies inside it;
//       tensors that own memory are aligned to their buffer type; views sit
//       at view_src->data + view_offset, inside their source's bytes;
//   (b) no two tensors owning memory in compute buffers (usage kCompute)
//       whose lifetimes overlap share a byte, unless the pair is a legal
//       in-place reuse (an OpCanRunInPlace node at its src[0]'s memory with
//       the same layout, where that source dies at the node, is neither
//       input, output nor weight and is read by the node through src[0]
//       only);
//   (c) inputs live from before the graph to its end and outputs (and nodes
//       nothing reads) to its end, so nothing overwrites them.
// Lifetimes: a node from its index, a leaf from before the graph, until the
// last node that reads it or a view of it.
#ifndef FERRY_ALLOC_TESTING_ALLOC_CHECKER_H_
#define FERRY_ALLOC_TESTING_ALLOC_CHECKER_H_

#include "absl/status/status.h"
#include "ferry/graph/graph.h"

namespace ferry::testing {

// Returns OkStatus or an InternalError describing the first violation.
// Fills `num_in_place` (if not null) with the in-place pairs it accepted.
absl::Status CheckGraphAllocation(const Graph& graph,
                                  int* num_in_place = nullptr);

}  // namespace ferry::testing

#endif  // FERRY_ALLOC_TESTING_ALLOC_CHECKER_H_
