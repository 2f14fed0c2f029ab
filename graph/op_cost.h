// A rough cost model of graph nodes for roofline estimates: floating-point
// operations and bytes moved per node. Simulated devices turn these into
// times (max(flops / peak_flops, bytes / bandwidth)); they are estimates, not
// measurements.
#ifndef FERRY_GRAPH_OP_COST_H_
#define FERRY_GRAPH_OP_COST_H_

#include <cstdint>

#include "ferry/graph/tensor.h"

namespace ferry {

// Returns the floating-point operations `node` performs: 2*K*M*N*batches for
// mul_mat, a few per element for element-wise and row-wise ops (exp, tanh
// and sqrt count as one), 0 for leaves, views and pure copies.
int64_t OpFlops(const Tensor& node);

// Returns the bytes `node` reads plus writes, counting each source once at
// its packed size (elements * element size) and the result once; 0 for
// leaves and views. get_rows counts only the rows it reads.
int64_t OpBytes(const Tensor& node);

}  // namespace ferry

#endif  // FERRY_GRAPH_OP_COST_H_
