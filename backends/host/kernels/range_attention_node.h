// range_attention (graph/ops.h) on the host: each (token, head) reads only
// its own range of K/V cache rows, in place.
#ifndef FERRY_BACKENDS_HOST_KERNELS_RANGE_ATTENTION_NODE_H_
#define FERRY_BACKENDS_HOST_KERNELS_RANGE_ATTENTION_NODE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "ferry/backends/host/kernels/kernel_context.h"
#include "ferry/graph/tensor.h"

namespace ferry {
namespace cpu_kernels {

// OK when the kernel can compute `node` (a kRangeAttention node with the
// shapes and dtypes ops.h gives it): every node that reaches
// RangeAttentionNode passed this, whoever built it (a remote worker's graph
// comes off the wire).
absl::Status CheckRangeAttention(const Tensor& node);

// Per-thread scores of one head: a row of the cache's length.
size_t RangeAttentionScratchBytes(const Tensor& node, int nth);

// Thread ith of nth computes every nth (token, kv head) pair from ith on
// (ranges differ in length, so interleaving balances them): the kv head's
// query heads one after another while its K and V rows are in cache, each
// as one DotRows, softmax and AxpyRows. A range outside [0, cache rows] is
// clamped to it.
void RangeAttentionNode(const Tensor& node, int ith, int nth,
                        const KernelContext& ctx);

}  // namespace cpu_kernels
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_KERNELS_RANGE_ATTENTION_NODE_H_
