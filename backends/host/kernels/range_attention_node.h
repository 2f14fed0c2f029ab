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

// Per-thread scores of a kv head's query heads, a row of the cache's length
// each, and for an f16 cache those query heads rounded to f16.
size_t RangeAttentionScratchBytes(const Tensor& node, int nth);

// Thread ith of nth computes every nth (token, kv head) pair from ith on
// (ranges differ in length, so interleaving balances them): every query
// head of the kv head reads each chunk of its K rows, then of its V rows,
// while the chunk is in cache (f16 rows widened as they are read). A range
// outside [0, cache rows] is clamped to it.
void RangeAttentionNode(const Tensor& node, int ith, int nth,
                        const KernelContext& ctx);

}  // namespace cpu_kernels
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_KERNELS_RANGE_ATTENTION_NODE_H_
