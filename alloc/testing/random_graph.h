// Seeded random DAGs for allocator tests: random shapes, element-wise and
// row-wise ops (which may run in place), mat-muls, views, reshapes,
// transposes with cont, cpy into live tensors, several buffer types, inputs,
// weights and outputs. Every graph is computable by the CPU kernels, and no
// tensor exceeds 16 KiB (64 x 64 f32).
#ifndef FERRY_ALLOC_TESTING_RANDOM_GRAPH_H_
#define FERRY_ALLOC_TESTING_RANDOM_GRAPH_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/tensor.h"

namespace ferry::testing {

struct RandomGraphOptions {
  int num_ops = 40;
  int num_types = 1;  // Buffer type indices drawn in [0, num_types).
};

struct RandomGraph {
  std::unique_ptr<Context> weights;  // Leafs flagged weight.
  std::unique_ptr<Context> ctx;      // Inputs and activations.
  Graph graph;
  std::vector<int> leaf_types;  // Parallel to graph.leafs().
  std::vector<int> node_types;  // Parallel to graph.nodes().
  std::vector<Tensor*> inputs;  // Flagged input (f32, or i32 positions).
};

// Builds the same graph for the same seed and options.
absl::StatusOr<RandomGraph> MakeRandomGraph(uint64_t seed,
                                            const RandomGraphOptions& options);

}  // namespace ferry::testing

#endif  // FERRY_ALLOC_TESTING_RANDOM_GRAPH_H_
