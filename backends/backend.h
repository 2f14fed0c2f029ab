// Backend: a stream of work on one device.
//
// Everything a backend does is enqueued in order and returns at once:
// tensor uploads and downloads, copies from other backends, graph compute,
// and waits on other backends' events. Errors found while enqueueing are
// returned; errors while running fail the backend's timeline, so the next
// event wait or Synchronize() reports them (and Synchronize() recovers).
//
// Coroutines await completion: `co_await backend.Compute(nodes)` or
// `co_await backend.Record()`; plain code calls Synchronize().
//
// Lifetime rule for async transfers: host memory passed to SetTensorAsync or
// GetTensorAsync must stay valid until the backend has passed that point
// (an event recorded after it completes, or Synchronize returns).
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

  // Uploads host bytes into `tensor` (in a buffer this backend can use).
  virtual absl::Status SetTensorAsync(Tensor& tensor, const void* data,
                                      size_t offset, size_t size) = 0;
  // Downloads bytes of `tensor` into host memory.
  virtual absl::Status GetTensorAsync(const Tensor& tensor, void* data,
                                      size_t offset, size_t size) = 0;

  // Copies all of `src`, produced by `src_backend`, into `dst` (a tensor
  // this backend uses). The copy waits, device-side, for the work enqueued
  // on `src_backend` so far and runs in this backend's order; the host does
  // not block. The base version handles a host-resident side through
  // Wait/SetTensorAsync/GetTensorAsync; backends override it for direct
  // device-to-device paths. Returns Unimplemented when no async path
  // exists; callers then synchronize and use CopyTensor().
  virtual absl::Status CopyTensorAsync(Backend& src_backend, const Tensor& src,
                                       Tensor& dst);

  // Computes `nodes` in order. Tensors must be placed in buffers this
  // backend supports and every node must satisfy SupportsOp.
  virtual absl::Status EnqueueCompute(NodeSpan nodes) = 0;

  // An event marking everything enqueued so far.
  virtual Event Record() = 0;
  // Makes later work on this backend wait for `event` (device-side).
  virtual absl::Status Wait(const Event& event) = 0;
  // Blocks until everything enqueued has run; returns (and clears) the
  // failure that stopped the backend, if any.
  virtual absl::Status Synchronize() = 0;

  // InvalidArgument unless `src` and `dst` have the same byte size (what
  // every CopyTensorAsync checks first).
  static absl::Status CheckCopySizes(const Tensor& src, const Tensor& dst);

  // Enqueues `nodes` and awaits their completion.
  Task<absl::Status> Compute(NodeSpan nodes);
  Task<absl::Status> Compute(const Graph& graph) {
    return Compute(NodeSpan(graph.nodes()));
  }
  // Blocking form of Compute.
  absl::Status ComputeBlocking(NodeSpan nodes);
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_BACKEND_H_
