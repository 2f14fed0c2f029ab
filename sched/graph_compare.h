// Graph copy and backend comparison (ggml's graph_copy and
// compare_graph_backend): copy a graph onto another backend, and run a graph
// on two backends node by node to find the first node whose results differ.
#ifndef FERRY_SCHED_GRAPH_COMPARE_H_
#define FERRY_SCHED_GRAPH_COMPARE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"

namespace ferry {

// A graph's twin on one backend. Owns its tensors and their memory.
struct GraphCopy {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Buffer> buffer;
  Graph graph;  // Same node order as the original.
};

// Copies every tensor of `graph` (metadata, and the data of its leafs) into
// one buffer of `backend`'s default type. Leafs must hold their data.
absl::StatusOr<GraphCopy> CopyGraph(const Graph& graph, Backend& backend);

struct GraphComparison {
  int64_t nodes_compared = 0;
  // The first node whose NMSE between the two backends exceeds the limit,
  // or -1 if none does.
  int64_t first_mismatch = -1;
  std::string mismatch_name;
  std::string mismatch_op;
  double mismatch_nmse = 0;
  double max_nmse = 0;  // Largest NMSE over the compared nodes.
};

// Copies `graph` onto `a` and `b`, computes it node by node on both and
// compares each node's result (normalized mean squared error, as ggml's
// test-backend-ops). Both backends must support every node.
absl::StatusOr<GraphComparison> CompareGraphBackends(const Graph& graph,
                                                     Backend& a, Backend& b,
                                                     double max_nmse = 1e-7);

}  // namespace ferry

#endif  // FERRY_SCHED_GRAPH_COMPARE_H_
