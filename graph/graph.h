// Graph: the nodes needed to compute some output tensors, in execution order.
//
// Graph::Build walks sources (and view sources) from the outputs with an
// iterative depth-first search, so graphs of any depth build without
// recursion; every source comes before its consumers. Tensors with an op are
// `nodes`; tensors without one (inputs, weights, constants) are `leafs`.
// DumpText and DumpDot print a graph for debugging.
#ifndef FERRY_GRAPH_GRAPH_H_
#define FERRY_GRAPH_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/graph/tensor.h"

namespace ferry {

// A contiguous range of a graph's nodes, e.g. one split of a schedule.
using GraphView = absl::Span<Tensor* const>;

// A topologically ordered list of nodes plus the leafs they read. Holds
// non-owning pointers: the tensors' Context must outlive the Graph.
// Thread-compatible; Build additionally writes a scratch mark into every
// tensor it visits, so graphs sharing tensors must not be built
// concurrently.
class Graph {
 public:
  Graph() = default;
  // Copies are the same graph (same id); a moved-from graph is empty.
  Graph(const Graph&) = default;
  Graph& operator=(const Graph&) = default;
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;

  // Builds the graph that computes `outputs` (in order; duplicates and
  // outputs reachable from earlier outputs are fine). Sources src[0..3] are
  // visited in index order, then view_src. Returns InvalidArgumentError for
  // a null output, and for a cycle (naming a tensor on it).
  static absl::StatusOr<Graph> Build(absl::Span<Tensor* const> outputs);

  // Nodes (tensors with op != kNone) in execution order.
  absl::Span<Tensor* const> nodes() const { return nodes_; }
  // Leafs (op == kNone) in the order the search reached them.
  absl::Span<Tensor* const> leafs() const { return leafs_; }
  int64_t num_nodes() const { return static_cast<int64_t>(nodes_.size()); }
  int64_t num_leafs() const { return static_cast<int64_t>(leafs_.size()); }
  Tensor* node(int64_t i) const { return nodes_[static_cast<size_t>(i)]; }

  // Returns nodes [begin, end); OutOfRangeError unless
  // 0 <= begin <= end <= num_nodes().
  absl::StatusOr<GraphView> NodeRange(int64_t begin, int64_t end) const;

  // Unique per Build in this process (0 for an empty graph): callers that
  // cache work per graph (the scheduler's plan) key it on the id, since a
  // new graph may be built at the address of an old one.
  uint64_t id() const { return id_; }

 private:
  uint64_t id_ = 0;
  std::vector<Tensor*> nodes_;
  std::vector<Tensor*> leafs_;
};

// "<op> <name>" ("mul_mat attn_q.3"): how every backend names a node's
// span in a trace, so traces of different devices line up.
std::string NodeSpanName(const Tensor& node);

// Returns one line per leaf then per node:
//   "leaf 0: 'x' [4, 2, 1, 1] f32 input"
//   "node 3: mul_mat 'y' [2, 2, 1, 1] f32 <- leaf 0 'w', node 2 'h'"
std::string DumpText(const Graph& graph);

// Returns a Graphviz digraph: leafs as boxes, nodes as ellipses labelled
// with op, name and shape, one edge per source (dashed for view_src).
std::string DumpDot(const Graph& graph);

}  // namespace ferry

#endif  // FERRY_GRAPH_GRAPH_H_
