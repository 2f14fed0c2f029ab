// Weights allocation: every tensor of a context in buffers of one type.
//
// AllocateWeights is ferry's ggml_backend_alloc_ctx_tensors_from_buft: it
// packs the context's tensors linearly (aligned) into as few buffers as the
// type's max buffer size allows, marks them BufferUsage::kWeights and places
// the tensors. It never leaves a context half-placed.
#ifndef FERRY_ALLOC_WEIGHTS_H_
#define FERRY_ALLOC_WEIGHTS_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/context.h"

namespace ferry {

// Places every tensor of `ctx` that has no memory yet into new buffers of
// `type` (views at their sources, after them), splitting into a new buffer
// whenever the next tensor would cross max_size. Returns the buffers (empty
// when there was nothing to place); the caller owns them and must keep them
// alive as long as the tensors are used. Errors, after which no tensor of
// `ctx` that was unplaced is placed: InvalidArgumentError naming a tensor
// larger than max_size, FailedPreconditionError for a view whose source has
// no memory and is not in `ctx`, and the type's error from Allocate.
absl::StatusOr<std::vector<std::unique_ptr<Buffer>>> AllocateWeights(
    Context& ctx, BufferType& type);

}  // namespace ferry

#endif  // FERRY_ALLOC_WEIGHTS_H_
