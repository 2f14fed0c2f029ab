// Checks and targets of the commands that name bytes of a session's
// buffer: where a transfer's bytes land (a tensor a ref names, or the whole
// buffer), the refusal of raw bytes in a buffer of weights, the range error.
#ifndef FERRY_BACKENDS_REMOTE_WORKER_INTERNAL_BUFFER_CHECKS_H_
#define FERRY_BACKENDS_REMOTE_WORKER_INTERNAL_BUFFER_CHECKS_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/remote/protocol/protocol.h"
#include "ferry/backends/remote/protocol/wire_graph.h"
#include "ferry/backends/remote/worker/internal/session.h"
#include "ferry/graph/tensor.h"

namespace ferry::remote::worker_internal {

// What a transfer's bytes [m.offset, +m.size) of a buffer are part of: the
// tensor a ref names (`offset` relative to it) or, for raw bytes, the whole
// buffer.
struct Target {
  std::shared_ptr<WireTensorRef> ref;  // Kept until the transfer is done.
  Tensor* tensor = nullptr;
  uint64_t offset = 0;
};

// Resolves the bytes [m.offset, +m.size) of `b` that `m` names.
absl::StatusOr<Target> ResolveTarget(BufferRec& b, const Message& m);

// Refuses `what` on a buffer that holds weights in the device's layout.
absl::Status RefuseWeights(const BufferRec& b, absl::string_view what);

// The error of bytes [offset, +size) outside `b`.
absl::Status RangeError(absl::string_view what, uint64_t offset, uint64_t size,
                        const BufferRec& b);

}  // namespace ferry::remote::worker_internal

#endif  // FERRY_BACKENDS_REMOTE_WORKER_INTERNAL_BUFFER_CHECKS_H_
