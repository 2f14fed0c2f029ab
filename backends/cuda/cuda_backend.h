// CudaBackend: a ferry Backend on one GPU: a compute stream plus dedicated
// host-to-device and device-to-host copy streams, a cuBLAS handle and its
// own timeline.
//
// Order. Each operation goes to the stream of the engine it needs (uploads
// on h2d, downloads on d2h, kernels and device copies on compute, peer
// copies on h2d) and waits, device-side, for the other streams' operations
// it conflicts with: those that write memory it touches or touch memory it
// writes (internal/hazard_tracker.h). Kernels wait for every earlier copy.
// So the backend behaves as one in-order stream wherever order is
// observable, while an upload into memory nobody is using (the next
// batch's copy slot) runs beside the kernels and downloads: both directions
// and compute overlap on one backend.
//
// Completion. Record() records a pooled CUDA event after the work so far and
// hands it to the device's completion poller, which signals this backend's
// timeline when cudaEventQuery reports it done (see
// internal/completion_poller.h for why polling and not host callbacks). The
// Event carries the CUDA event as its native handle (cuda_native_event.h).
// Awaiting coroutines resume on an executor, never on the poller (a device
// thread; event.h).
//
// Waits. EnqueueWait() on a CUDA backend's event (of any GPU) is a
// device-side cudaStreamWaitEvent on its native handle, on every stream of
// this backend, so the next Record() covers it. An event of a host-side
// backend (CPU, sim), or of a CUDA backend whose record is itself still
// held on the host, cannot be waited on by a GPU: later operations are held
// on the host and issued by the thread that completes that event
// (internal/gated_issue_queue.h); the enqueuing thread never blocks. Held
// operations keep copies of what they read from tensors (addresses, shapes),
// so tensors may be re-placed after enqueueing, as on other backends.
//
// Freed memory. FenceForFree() gives the caching allocator a fence after
// everything enqueued so far on this backend, including operations still
// held on the host, so memory freed now is not handed out again while they
// may still touch it.
//
// Errors. Every CUDA and cuBLAS call's error is a status naming the call,
// taken out of the calling thread's last-error slot (a launch reads only its
// own result, never an earlier call's leftover). A failure fails this
// backend's timeline (its events and Synchronize report it) and the
// operations queued behind it are dropped; Synchronize() returns it and the
// backend works again, unless the error was sticky (the device's context is
// ruined, whichever call found it: a launch, a cuBLAS call, a query, a
// synchronization): then every call returns it.
#ifndef FERRY_BACKENDS_CUDA_CUDA_BACKEND_H_
#define FERRY_BACKENDS_CUDA_CUDA_BACKEND_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/cuda/cuda_device.h"
#include "ferry/backends/cuda/cuda_event_pool.h"
#include "ferry/backends/event.h"
#include "ferry/graph/tensor.h"
#include "ferry/runtime/timeline_semaphore.h"

namespace ferry {

class CudaNativeEvent;
namespace cuda_internal {
class Fence;
class MemoryAccess;
}  // namespace cuda_internal

// Thread-compatible (one enqueuer at a time), like every Backend.
class CudaBackend final : public Backend {
 public:
  enum class StreamKind : int { kCompute = 0, kH2D = 1, kD2H = 2 };
  static constexpr int kNumStreams = 3;

  // Waits for the work enqueued so far.
  ~CudaBackend() override;

  absl::string_view name() const override { return device_.name(); }
  Device& device() const override { return device_; }
  CudaDevice& cuda_device() const { return device_; }

  // `tensor` must be in this device's memory; `data` is host memory
  // (pinned for truly asynchronous copies).
  absl::Status EnqueueSetTensor(Tensor& tensor, const void* data, size_t offset,
                                size_t size) override;
  absl::Status EnqueueGetTensor(const Tensor& tensor, void* data, size_t offset,
                                size_t size) override;
  // Device-to-device within this GPU and peer copies from other GPUs
  // (cudaMemcpyPeerAsync, peer access enabled by the first); host-resident
  // sides as Backend's.
  absl::Status EnqueueCopyTensor(Backend& src_backend, const Tensor& src,
                                 Tensor& dst) override;
  // Every node must satisfy SupportsOp and live in this device's memory.
  absl::Status EnqueueCompute(NodeSpan nodes) override;
  Event Record() override;
  absl::Status EnqueueWait(const Event& event) override;
  absl::Status Synchronize() override;

  // The underlying stream, for interop: work the caller puts on it runs in
  // that stream's order and is covered by the next Record() (call this
  // before each such launch); the backend's operations on other streams do
  // not wait for it.
  cudaStream_t stream(StreamKind kind) {
    dirty_[static_cast<int>(kind)].store(true, std::memory_order_relaxed);
    return streams_[static_cast<int>(kind)];
  }

  // A fence after everything enqueued so far (also what is held on the
  // host), for memory freed now: the caching allocator hands it out again
  // once the fence completed. Thread-safe.
  std::shared_ptr<cuda_internal::Fence> FenceForFree();

 private:
  friend class CudaDevice;

  explicit CudaBackend(CudaDevice& device);
  absl::Status Init();

  // --- Issue side: runs under the issue queue's lock, with the device
  // current (CudaDevice::Scope). ---
  // Makes `kind`'s stream wait for the other streams' operations that
  // `access` conflicts with (all of them if `wait_all`); returns the
  // stream.
  absl::StatusOr<cudaStream_t> Begin(StreamKind kind,
                                     cuda_internal::MemoryAccess access,
                                     bool wait_all);
  // Grows the kernel scratch to `bytes`.
  absl::Status EnsureScratch(size_t bytes);
  absl::Status LaunchNodes(NodeSpan nodes);
  // Converts and, for sticky errors, marks the device.
  absl::Status Check(cudaError_t error, absl::string_view context) {
    return device_.Check(error, context);
  }

  // Fails the current timeline from the poller thread (never inline under
  // the issue lock, where resumed waiters could re-enter this backend).
  void FailTimelineLater(absl::Status status);
  std::shared_ptr<TimelineSemaphore> timeline() const;

  CudaDevice& device_;
  cudaStream_t streams_[kNumStreams] = {};
  cudaEvent_t chain_events_[kNumStreams] = {};  // Re-recorded to chain.
  // Joins the three streams for Record() without making one wait for
  // another.
  cudaStream_t join_stream_ = nullptr;
  std::atomic<bool> dirty_[kNumStreams] = {};  // Work since last Record().
  cublasHandle_t cublas_ = nullptr;
  bool allow_tf32_ = false;         // CreateBackend's "tf32=1".
  uint64_t compute_stream_id_ = 0;  // For the caching allocator.
  uint64_t lane_ = 0;               // In the device's poller.

  mutable std::mutex timeline_mu_;
  std::shared_ptr<TimelineSemaphore> timeline_ ABSL_GUARDED_BY(timeline_mu_);
  uint64_t last_value_ = 0;  // Enqueuer only.
  // Enqueuer only: whether anything was enqueued since the last Record(); if
  // not, Record() returns the last event again (complete on a fresh stream).
  bool work_since_record_ = false;
  std::shared_ptr<CudaNativeEvent> last_native_;  // Of last_value_'s event.
  // Enqueuer only: events waited on device-side since the last Record().
  // That Record's event is signalled only after them, so whoever sees it
  // complete sees them complete too (their own watches may lag).
  std::vector<Event> waited_since_record_;

  // The issue side's machinery (hazards, the issue queue, workspaces): in
  // cuda_backend.cc, so this header includes no internal/ header. Last: it
  // goes first (its queue runs nothing once the backend is being torn down).
  struct IssueState;
  std::unique_ptr<IssueState> issue_;
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_CUDA_CUDA_BACKEND_H_
