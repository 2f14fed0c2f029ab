// The CPU backend's op kernels: a multi-threaded implementation of every
// graph op (graph/ops.h) on host memory.
//
// Threading follows ggml: for each node, the backend calls
// ComputeNode(node, ith, nth, ctx) from each of its nth workers (ith = 0 ..
// nth - 1) and puts a barrier between nodes. Each call computes a disjoint
// share of the node (rows, row segments or output blocks) and writes nothing
// else but its slice of ctx's scratch, so the kernels take no locks.
//
// Typical use:
//   FERRY_RETURN_IF_ERROR(cpu_kernels::CheckSupported(*node));  // At build.
//   size_t scratch = cpu_kernels::ScratchBytes(*node, nth);     // Plan.
//   ... on each worker ith: cpu_kernels::ComputeNode(*node, ith, nth, ctx);
#ifndef FERRY_BACKENDS_HOST_KERNELS_KERNELS_H_
#define FERRY_BACKENDS_HOST_KERNELS_KERNELS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "ferry/backends/host/kernels/kernel_context.h"
#include "ferry/graph/tensor.h"

namespace ferry {
namespace cpu_kernels {

// Returns OK when ComputeNode computes `node` correctly: its op, the dtypes
// of node and sources, their shapes and their layouts (rows contiguous where
// the op needs it, node itself contiguous for computing ops, cpy's node laid
// out like its b). Leafs (kNone) and view ops are supported and compute
// nothing. Otherwise returns UnimplementedError for an op or dtype the
// kernels lack, or InvalidArgumentError for shapes or layouts that break
// the op's contract, naming the op and the shapes. Does not look at data.
// A backend's supports_op should be exactly this.
absl::Status CheckSupported(const Tensor& node);

// Returns the scratch bytes that nth threads computing `node` need in total
// (nth equal slices, each a multiple of kScratchAlignment); 0 for most ops.
size_t ScratchBytes(const Tensor& node, int nth);

// Computes thread ith's share (0 <= ith < nth) of `node`; all nth calls
// together compute all of it. `node` must pass CheckSupported, and node.data
// and its sources' data must be host pointers holding the sources' values.
// Ops that OpCanRunInPlace also work with node.data == src[0]->data (same
// layout). ctx must hold ScratchBytes(node, nth) bytes. The calls may run
// concurrently; they only write their own part of node.data (cpy: of b's
// memory) and their own scratch slice. Out-of-range get_rows ids give a row
// of NaN instead of reading out of bounds.
void ComputeNode(const Tensor& node, int ith, int nth,
                 const KernelContext& ctx);

}  // namespace cpu_kernels
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_KERNELS_KERNELS_H_
