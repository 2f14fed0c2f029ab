// Backend: a stream of work on one device.
//
// Everything a backend does is enqueued in order and returns at once:
// tensor uploads and downloads, copies from other backends, graph compute,
// and waits on other backends' events. Errors found while enqueueing are
// returned; errors while running fail the backend's timeline, so the next
// event wait or Synchronize() reports them (and Synchronize() recovers).
//
// Names say how a call waits, the same across ferry:
//   EnqueueX(...)   queues X and returns at once (a status for bad input)
//   XAsync(...)     a Task to co_await: completes when X is done
//   X(...)          blocks until X is done (Compute, Synchronize)
// and events are awaited (`co_await`), waited for (`WaitBlocking`) or
// waited for by later work (`EnqueueWait`); see event.h.
//
// The two rules every backend follows (tests/conformance checks them):
//  1. EnqueueCompute reads the nodes' metadata (op, op params, dtype,
//     shapes, strides, sources, placement) before it returns and keeps no
//     pointer to the Tensor objects: they may be changed or destroyed at
//     once. The memory they point at (their buffers) must stay allocated
//     until the work is done, and its bytes are read when the work runs.
//  2. Host memory given to EnqueueSetTensor / EnqueueGetTensor must stay
//     valid, and untouched by the host, until the backend has passed that
//     point: an event recorded after the call completes, or Synchronize
//     returns. A backend may finish a transfer from pageable memory before
//     returning, but callers must not rely on it.
//
// Completion: events (and so ComputeAsync) resume their awaiters on an
// executor, never on the device's own threads (event.h).
#ifndef FERRY_BACKENDS_BACKEND_H_
#define FERRY_BACKENDS_BACKEND_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/device.h"
#include "ferry/backends/event.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/tensor.h"
#include "ferry/runtime/task.h"

namespace ferry {

// Nodes of a graph to compute, in order (a whole graph or a split of it).
using NodeSpan = absl::Span<Tensor* const>;

// Thread-compatible: one thread (or one coroutine at a time) enqueues.
class Backend {
 public:
  virtual ~Backend() = default;

  virtual absl::string_view name() const = 0;
  virtual Device& device() const = 0;
  BufferType* default_buffer_type() const {
    return device().default_buffer_type();
  }
  bool SupportsOp(const Tensor& node) const {
    return device().SupportsOp(node);
  }
  absl::Status CheckOp(const Tensor& node) const {
    return device().CheckOp(node);
  }

  // Queues an upload of host bytes into `tensor` (in a buffer this backend
  // can use). See rule 2 above for `data`'s lifetime.
  virtual absl::Status EnqueueSetTensor(Tensor& tensor, const void* data,
                                        size_t offset, size_t size) = 0;
  // Queues a download of bytes of `tensor` into host memory `data`.
  virtual absl::Status EnqueueGetTensor(const Tensor& tensor, void* data,
                                        size_t offset, size_t size) = 0;

  // Queues a copy of all of `src`, produced by `src_backend`, into `dst` (a
  // tensor this backend uses). The copy waits for the work enqueued on
  // `src_backend` so far and runs in this backend's order; the host does
  // not block. The base version handles a host-resident side through
  // EnqueueWait/EnqueueSetTensor/EnqueueGetTensor; backends override it for
  // direct device-to-device paths. Returns Unimplemented when no async path
  // exists; callers then synchronize and use CopyTensor().
  virtual absl::Status EnqueueCopyTensor(Backend& src_backend,
                                         const Tensor& src, Tensor& dst);

  // Queues `nodes`, computed in order (see rule 1 above). Every tensor they
  // read or write must be placed in memory this backend can use, and every
  // node must pass CheckOp; otherwise a status says which and why, and
  // nothing is queued.
  virtual absl::Status EnqueueCompute(NodeSpan nodes) = 0;

  // An event marking everything enqueued so far (complete if nothing was).
  virtual Event Record() = 0;
  // Makes later work on this backend wait for `event`; if it fails, this
  // backend fails with its status. device().WaitMode(event) says how.
  virtual absl::Status EnqueueWait(const Event& event) = 0;
  // Blocks until everything enqueued has run; returns (and clears) the
  // failure that stopped the backend, if any, so it works again.
  virtual absl::Status Synchronize() = 0;

  // InvalidArgument unless `src` and `dst` have the same byte size (what
  // every EnqueueCopyTensor checks first).
  static absl::Status CheckCopySizes(const Tensor& src, const Tensor& dst);

  // Enqueues `nodes` and awaits their completion.
  Task<absl::Status> ComputeAsync(NodeSpan nodes);
  Task<absl::Status> ComputeAsync(const Graph& graph) {
    return ComputeAsync(NodeSpan(graph.nodes()));
  }
  // Enqueues `nodes` and blocks until they are computed.
  absl::Status Compute(NodeSpan nodes);
  absl::Status Compute(const Graph& graph) {
    return Compute(NodeSpan(graph.nodes()));
  }
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_BACKEND_H_
