#include "ferry/backends/cuda/cuda_backend.h"

#include <algorithm>
#include <condition_variable>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/backends/cuda/cuda_native_event.h"
#include "ferry/backends/cuda/cuda_status.h"
#include "ferry/backends/cuda/internal/caching_allocator.h"
#include "ferry/backends/cuda/internal/completion_poller.h"
#include "ferry/backends/cuda/internal/gated_issue_queue.h"
#include "ferry/backends/cuda/internal/hazard_tracker.h"
#include "ferry/backends/cuda/kernels/cuda_kernels.h"
#include "ferry/backends/node_snapshot.h"
#include "ferry/graph/op.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {
namespace {

// cuBLAS's workspace per handle (its guidance for Hopper is 32 MiB; smaller
// workspaces make it pick slower algorithms for big GEMMs).
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

absl::Status CublasCheck(cublasStatus_t status, absl::string_view context) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message =
      absl::StrCat(context, ": ", cublasGetStatusName(status), " (",
                   cublasGetStatusString(status), ")");
  if (status == CUBLAS_STATUS_ALLOC_FAILED) {
    return absl::ResourceExhaustedError(message);
  }
  if (status == CUBLAS_STATUS_NOT_INITIALIZED) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

// A recorded event as a caching-allocator fence.
class EventFence : public cuda_internal::Fence {
 public:
  explicit EventFence(std::shared_ptr<PooledCudaEvent> event)
      : event_(std::move(event)) {}
  bool IsComplete() override {
    // Errors count as complete: the work will not touch memory any more.
    const cudaError_t error = cudaEventQuery(event_->get());
    IgnoreCudaError(error);
    return error != cudaErrorNotReady;
  }
  bool Wait() override {
    IgnoreCudaError(cudaEventSynchronize(event_->get()));
    return true;
  }

 private:
  std::shared_ptr<PooledCudaEvent> event_;
};

// A fence after a backend's work, for memory freed now. Its events are
// recorded (Issue) when the backend issues what was enqueued before the
// free, which may be later if that work is held on the host.
class BackendFence : public cuda_internal::Fence {
 public:
  // The events mark the work so far on each stream (none: nothing to wait
  // for, e.g. the context is lost).
  void Issue(std::vector<std::shared_ptr<PooledCudaEvent>> events) {
    std::lock_guard<std::mutex> lock(mu_);
    events_ = std::move(events);
    issued_ = true;
    issued_cv_.notify_all();
  }
  bool IsComplete() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!issued_) return false;
    for (const auto& event : events_) {
      const cudaError_t error = cudaEventQuery(event->get());
      IgnoreCudaError(error);
      if (error == cudaErrorNotReady) return false;
    }
    events_.clear();
    return true;
  }
  bool Wait() override {
    std::vector<std::shared_ptr<PooledCudaEvent>> events;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!issued_) return false;  // Held on the host: cannot wait here.
      events = events_;
    }
    for (const auto& event : events) {
      IgnoreCudaError(cudaEventSynchronize(event->get()));
    }
    return true;
  }
  void WaitIncludingHeld() override {
    {
      // Issued by whoever releases the held work (the backend's queue runs
      // the fence's step even after a failure, and its destructor waits
      // for held work), so this ends once the event holding it completes.
      std::unique_lock<std::mutex> lock(mu_);
      issued_cv_.wait(lock, [this] { return issued_; });
    }
    (void)Wait();
  }

 private:
  std::mutex mu_;
  std::condition_variable issued_cv_;
  bool issued_ = false;
  std::vector<std::shared_ptr<PooledCudaEvent>> events_;
};

// Bytes from tensor.data to one past its last element (views may be
// strided or permuted; a block-quantized row ends with its last block).
size_t ByteExtent(const Tensor& tensor) {
  if (tensor.NumElements() == 0) return 0;
  if (IsQuantized(tensor.dtype)) {
    size_t last = 0;
    for (int i = 1; i < kMaxDims; ++i) {
      last += static_cast<size_t>(tensor.ne[i] - 1) * tensor.nb[i];
    }
    return last + static_cast<size_t>(tensor.RowBytes());
  }
  size_t last = 0;
  for (int i = 0; i < kMaxDims; ++i) {
    last += static_cast<size_t>(tensor.ne[i] - 1) * tensor.nb[i];
  }
  return last + tensor.ElementSize();
}

bool InDeviceMemory(const Tensor& tensor, const CudaDevice& device) {
  return tensor.buffer != nullptr &&
         tensor.buffer->type()->device() == &device &&
         !tensor.buffer->is_host();
}

const CudaBufferType* AsCudaMemory(const Tensor& tensor) {
  if (tensor.buffer == nullptr || tensor.buffer->is_host()) return nullptr;
  Device* device = tensor.buffer->type()->device();
  auto* cuda = dynamic_cast<CudaDevice*>(device);
  if (cuda == nullptr || tensor.buffer->type() != cuda->default_buffer_type()) {
    return nullptr;
  }
  return static_cast<const CudaBufferType*>(tensor.buffer->type());
}

absl::Status CheckRange(const Tensor& tensor, size_t offset, size_t size,
                        absl::string_view what) {
  const size_t bytes = static_cast<size_t>(tensor.NumBytes());
  if (offset > bytes || size > bytes - offset) {
    return absl::OutOfRangeError(
        absl::StrCat(what, " of '", tensor.name, "': bytes [", offset, ", ",
                     offset, " + ", size, ") outside its ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

struct CudaBackend::IssueState {
  explicit IssueState(cuda_internal::GatedIssueQueue::FailureHandler on_failure)
      : queue(std::move(on_failure)) {}

  cuda_internal::HazardTracker hazards{kNumStreams, /*max_pending=*/32};
  cuda_internal::CachingAllocator::Block cublas_workspace;
  cuda_internal::CachingAllocator::Block scratch;
  cuda_internal::GatedIssueQueue queue;
};

CudaBackend::CudaBackend(CudaDevice& device)
    : device_(device),
      timeline_(std::make_shared<TimelineSemaphore>()),
      issue_(std::make_unique<IssueState>(
          [this](absl::Status status) { FailTimelineLater(status); })) {}

absl::Status CudaBackend::Init() {
  CudaDevice::Scope scope(device_);
  FERRY_RETURN_IF_ERROR(scope.status());
  for (int i = 0; i < kNumStreams; ++i) {
    FERRY_RETURN_IF_ERROR(
        Check(cudaStreamCreateWithFlags(&streams_[i], cudaStreamNonBlocking),
              "cudaStreamCreateWithFlags"));
    FERRY_RETURN_IF_ERROR(Check(
        cudaEventCreateWithFlags(&chain_events_[i], cudaEventDisableTiming),
        "cudaEventCreateWithFlags"));
  }
  FERRY_RETURN_IF_ERROR(
      Check(cudaStreamCreateWithFlags(&join_stream_, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags"));
  compute_stream_id_ = reinterpret_cast<uint64_t>(
      streams_[static_cast<int>(StreamKind::kCompute)]);
  FERRY_RETURN_IF_ERROR(CublasCheck(cublasCreate(&cublas_), "cublasCreate"));
  FERRY_RETURN_IF_ERROR(CublasCheck(
      cublasSetStream(cublas_,
                      streams_[static_cast<int>(StreamKind::kCompute)]),
      "cublasSetStream"));
  FERRY_ASSIGN_OR_RETURN(
      issue_->cublas_workspace,
      device_.allocator().Allocate(kCublasWorkspaceBytes, compute_stream_id_));
  FERRY_RETURN_IF_ERROR(
      CublasCheck(cublasSetWorkspace(cublas_, issue_->cublas_workspace.ptr,
                                     issue_->cublas_workspace.size),
                  "cublasSetWorkspace"));
  lane_ = device_.poller().NewLane();
  CudaDevice::AddBackend(this);
  return absl::OkStatus();
}

CudaBackend::~CudaBackend() {
  if (lane_ != 0) (void)Synchronize();
  issue_->queue.WaitIdle();
  CudaDevice::RemoveBackend(this);
  CudaDevice::Scope scope(device_);
  for (int i = 0; i < kNumStreams; ++i) {
    if (streams_[i] != nullptr) {
      IgnoreCudaError(cudaStreamSynchronize(streams_[i]));
    }
  }
  if (cublas_ != nullptr) (void)cublasDestroy(cublas_);
  // The streams are idle: same-stream reuse is safe, others need no fence.
  if (issue_->cublas_workspace.ptr != nullptr) {
    device_.allocator().Free(issue_->cublas_workspace, cuda_internal::kNoStream,
                             nullptr, {});
  }
  if (issue_->scratch.ptr != nullptr) {
    device_.allocator().Free(issue_->scratch, cuda_internal::kNoStream, nullptr,
                             {});
  }
  for (int i = 0; i < kNumStreams; ++i) {
    if (chain_events_[i] != nullptr) {
      IgnoreCudaError(cudaEventDestroy(chain_events_[i]));
    }
    if (streams_[i] != nullptr) IgnoreCudaError(cudaStreamDestroy(streams_[i]));
  }
  if (join_stream_ != nullptr) IgnoreCudaError(cudaStreamDestroy(join_stream_));
}

std::shared_ptr<TimelineSemaphore> CudaBackend::timeline() const {
  std::lock_guard<std::mutex> lock(timeline_mu_);
  return timeline_;
}

void CudaBackend::FailTimelineLater(absl::Status status) {
  // Through the poller lane: earlier events complete first (their work did
  // run), then the failure; and nobody resumes under the issue lock.
  std::shared_ptr<TimelineSemaphore> target = timeline();
  device_.poller().Watch(
      lane_, [status]() -> absl::StatusOr<bool> { return status; },
      [target](absl::Status failure) { target->Fail(std::move(failure)); });
}

absl::StatusOr<cudaStream_t> CudaBackend::Begin(
    StreamKind kind, cuda_internal::MemoryAccess access, bool wait_all) {
  const int k = static_cast<int>(kind);
  access.Finish();
  for (int t : issue_->hazards.Add(k, std::move(access), wait_all)) {
    // Wait for t's tail: record where it is now and wait for that.
    FERRY_RETURN_IF_ERROR(Check(cudaEventRecord(chain_events_[t], streams_[t]),
                                "cudaEventRecord"));
    FERRY_RETURN_IF_ERROR(
        Check(cudaStreamWaitEvent(streams_[k], chain_events_[t], 0),
              "cudaStreamWaitEvent"));
  }
  dirty_[k].store(true, std::memory_order_relaxed);
  return streams_[k];
}

absl::Status CudaBackend::EnqueueSetTensor(Tensor& tensor, const void* data,
                                           size_t offset, size_t size) {
  FERRY_RETURN_IF_ERROR(device_.sticky_error());
  work_since_record_ = true;
  if (!InDeviceMemory(tensor, device_)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": EnqueueSetTensor of '", tensor.name,
                     "': not in this device's memory"));
  }
  FERRY_RETURN_IF_ERROR(CheckRange(tensor, offset, size, "EnqueueSetTensor"));
  if (size == 0) return absl::OkStatus();
  void* dst = static_cast<char*>(tensor.data) + offset;
  issue_->queue.Run([this, dst, data, size]() -> absl::Status {
    CudaDevice::Scope scope(device_);
    FERRY_RETURN_IF_ERROR(scope.status());
    cuda_internal::MemoryAccess access;
    access.AddRead(data, size);
    access.AddWrite(dst, size);
    FERRY_ASSIGN_OR_RETURN(cudaStream_t s,
                           Begin(StreamKind::kH2D, std::move(access), false));
    return Check(cudaMemcpyAsync(dst, data, size, cudaMemcpyHostToDevice, s),
                 absl::StrCat("cudaMemcpyAsync(h2d, ", size, " bytes)"));
  });
  return absl::OkStatus();
}

absl::Status CudaBackend::EnqueueGetTensor(const Tensor& tensor, void* data,
                                           size_t offset, size_t size) {
  FERRY_RETURN_IF_ERROR(device_.sticky_error());
  work_since_record_ = true;
  if (!InDeviceMemory(tensor, device_)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": EnqueueGetTensor of '", tensor.name,
                     "': not in this device's memory"));
  }
  FERRY_RETURN_IF_ERROR(CheckRange(tensor, offset, size, "EnqueueGetTensor"));
  if (size == 0) return absl::OkStatus();
  const void* src = static_cast<const char*>(tensor.data) + offset;
  issue_->queue.Run([this, src, data, size]() -> absl::Status {
    CudaDevice::Scope scope(device_);
    FERRY_RETURN_IF_ERROR(scope.status());
    cuda_internal::MemoryAccess access;
    access.AddRead(src, size);
    access.AddWrite(data, size);
    FERRY_ASSIGN_OR_RETURN(cudaStream_t s,
                           Begin(StreamKind::kD2H, std::move(access), false));
    return Check(cudaMemcpyAsync(data, src, size, cudaMemcpyDeviceToHost, s),
                 absl::StrCat("cudaMemcpyAsync(d2h, ", size, " bytes)"));
  });
  return absl::OkStatus();
}

absl::Status CudaBackend::EnqueueCopyTensor(Backend& src_backend,
                                            const Tensor& src, Tensor& dst) {
  FERRY_RETURN_IF_ERROR(device_.sticky_error());
  work_since_record_ = true;
  const CudaBufferType* src_type = AsCudaMemory(src);
  if (src_type == nullptr || !InDeviceMemory(dst, device_)) {
    return Backend::EnqueueCopyTensor(src_backend, src, dst);
  }
  FERRY_RETURN_IF_ERROR(CheckCopySizes(src, dst));
  const size_t bytes = static_cast<size_t>(src.NumBytes());
  // After the producer's work so far: device-side when it is a CUDA backend.
  FERRY_RETURN_IF_ERROR(EnqueueWait(src_backend.Record()));
  const int src_ordinal = src_type->cuda_device().ordinal();
  const void* from = src.data;
  void* to = dst.data;
  issue_->queue.Run([this, src_ordinal, from, to, bytes]() -> absl::Status {
    CudaDevice::Scope scope(device_);
    FERRY_RETURN_IF_ERROR(scope.status());
    // Peer copies pull over the inbound (h2d) engine; local ones are
    // device-memory copies on the compute stream.
    const bool peer = src_ordinal != device_.ordinal();
    if (peer) device_.EnablePeerAccessTo(src_ordinal);
    cuda_internal::MemoryAccess access;
    access.AddRead(from, bytes);
    access.AddWrite(to, bytes);
    FERRY_ASSIGN_OR_RETURN(cudaStream_t s,
                           Begin(peer ? StreamKind::kH2D : StreamKind::kCompute,
                                 std::move(access), false));
    if (peer) {
      return Check(
          cudaMemcpyPeerAsync(to, device_.ordinal(), from, src_ordinal, bytes,
                              s),
          absl::StrCat("cudaMemcpyPeerAsync(cuda", src_ordinal, " -> cuda",
                       device_.ordinal(), ", ", bytes, " bytes)"));
    }
    return Check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, s),
                 absl::StrCat("cudaMemcpyAsync(d2d, ", bytes, " bytes)"));
  });
  return absl::OkStatus();
}

absl::Status CudaBackend::EnsureScratch(size_t bytes) {
  if (bytes <= issue_->scratch.size) return absl::OkStatus();
  if (issue_->scratch.ptr != nullptr) {
    // Kernels already queued on the compute stream may still use it: the
    // compute stream reuses it at once, others after this fence.
    FERRY_ASSIGN_OR_RETURN(std::shared_ptr<PooledCudaEvent> event,
                           device_.AcquireEvent());
    FERRY_RETURN_IF_ERROR(
        Check(cudaEventRecord(event->get(),
                              streams_[static_cast<int>(StreamKind::kCompute)]),
              "cudaEventRecord"));
    device_.allocator().Free(issue_->scratch, compute_stream_id_,
                             std::make_shared<EventFence>(std::move(event)),
                             {});
    issue_->scratch = {};
  }
  FERRY_ASSIGN_OR_RETURN(
      issue_->scratch, device_.allocator().Allocate(bytes, compute_stream_id_));
  return absl::OkStatus();
}

absl::Status CudaBackend::LaunchNodes(NodeSpan nodes) {
  CudaDevice::Scope scope(device_);
  FERRY_RETURN_IF_ERROR(scope.status());
  // Kernels wait for every earlier copy; what they touch is recorded so
  // later copies wait only for the kernels they conflict with.
  cuda_internal::MemoryAccess access;
  for (const Tensor* node : nodes) {
    if (node->op == Op::kNone || IsViewOp(node->op)) continue;
    access.AddWrite(node->data, ByteExtent(*node));
    for (int i = 0; i < kMaxSrc; ++i) {
      const Tensor* src = node->src[i];
      if (src == nullptr) continue;
      // cpy writes into b's memory.
      if (node->op == Op::kCpy && i == 1) {
        access.AddWrite(src->data, ByteExtent(*src));
      } else {
        access.AddRead(src->data, ByteExtent(*src));
      }
    }
  }
  FERRY_ASSIGN_OR_RETURN(cudaStream_t s,
                         Begin(StreamKind::kCompute, std::move(access), true));
  size_t scratch = 0;
  for (const Tensor* node : nodes) {
    scratch = std::max(scratch, cuda_kernels::ScratchBytes(*node));
  }
  FERRY_RETURN_IF_ERROR(EnsureScratch(scratch));
  cuda_kernels::LaunchContext context;
  context.stream = s;
  context.cublas = cublas_;
  context.scratch = issue_->scratch.ptr;
  context.scratch_bytes = issue_->scratch.size;
  context.allow_tf32 = allow_tf32_;
  for (const Tensor* node : nodes) {
    if (node->op == Op::kNone || IsViewOp(node->op)) continue;
    // A launch or cuBLAS call that finds the context ruined returns its
    // error without the device's Check: record it as the sticky error.
    FERRY_RETURN_IF_ERROR(
        device_.CheckLaunch(cuda_kernels::Launch(*node, context)));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::EnqueueCompute(NodeSpan nodes) {
  FERRY_RETURN_IF_ERROR(device_.sticky_error());
  work_since_record_ = true;
  for (const Tensor* node : nodes) {
    if (node->op == Op::kNone || IsViewOp(node->op)) continue;
    if (absl::Status op = device_.CheckOp(*node); !op.ok()) {
      return absl::Status(
          op.code(), absl::StrCat(name(), " cannot compute node '", node->name,
                                  "' (", OpName(node->op), " ",
                                  node->ShapeString(), "): ", op.message()));
    }
    if (!InDeviceMemory(*node, device_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name(), ": node '", node->name, "' is not in this device's memory"));
    }
    for (const Tensor* src : node->src) {
      if (src != nullptr && !InDeviceMemory(*src, device_)) {
        return absl::InvalidArgumentError(
            absl::StrCat(name(), ": input '", src->name, "' of node '",
                         node->name, "' is not in this device's memory"));
      }
    }
  }
  if (nodes.empty()) return absl::OkStatus();
  if (!issue_->queue.holding()) {
    // Runs now, while the caller's tensors are as they were enqueued.
    issue_->queue.Run([this, nodes]() { return LaunchNodes(nodes); });
    return absl::OkStatus();
  }
  // Held: launch later from a snapshot of what the nodes read now (rule 1
  // of backend.h). Placement was checked above: data stays as it is.
  FERRY_ASSIGN_OR_RETURN(
      NodeSnapshot snapshot,
      NodeSnapshot::Make(nodes, [](const Tensor& t) -> absl::StatusOr<void*> {
        return t.data;
      }));
  auto held = std::make_shared<NodeSnapshot>(std::move(snapshot));
  issue_->queue.Run([this, held]() { return LaunchNodes(held->nodes()); });
  return absl::OkStatus();
}

Event CudaBackend::Record() {
  std::shared_ptr<TimelineSemaphore> target = timeline();
  absl::Status sticky = device_.sticky_error();
  if (!sticky.ok()) {
    target->Fail(sticky);
    return Event(target, last_value_ + 1, &device_);
  }
  // Nothing new since the last event (or ever): it covers everything.
  bool streams_used = false;  // Through stream(): tests launch there.
  for (const std::atomic<bool>& dirty : dirty_) {
    streams_used = streams_used || dirty.load(std::memory_order_relaxed);
  }
  if (!work_since_record_ && !streams_used) {
    return Event(target, last_value_, &device_, last_native_);
  }
  work_since_record_ = false;
  std::vector<Event> waited = std::move(waited_since_record_);
  waited_since_record_.clear();
  const uint64_t value = ++last_value_;
  absl::StatusOr<std::shared_ptr<PooledCudaEvent>> pooled;
  {
    CudaDevice::Scope scope(device_);
    pooled =
        scope.status().ok()
            ? device_.AcquireEvent()
            : absl::StatusOr<std::shared_ptr<PooledCudaEvent>>(scope.status());
  }
  if (!pooled.ok()) {
    // Fails the timeline in order, after the work before it.
    issue_->queue.Run([status = pooled.status()] { return status; });
    last_native_.reset();
    return Event(target, value, &device_);
  }
  auto native = std::make_shared<CudaNativeEvent>(*std::move(pooled));
  issue_->queue.Run([this, target, value, native,
                     waited = std::move(waited)]() mutable -> absl::Status {
    CudaDevice::Scope scope(device_);
    FERRY_RETURN_IF_ERROR(scope.status());
    // Join the streams with work since the last Record() on the join stream
    // (earlier work is covered by the join stream's earlier waits).
    for (int i = 0; i < kNumStreams; ++i) {
      if (!dirty_[i].exchange(false)) continue;
      FERRY_RETURN_IF_ERROR(Check(
          cudaEventRecord(chain_events_[i], streams_[i]), "cudaEventRecord"));
      FERRY_RETURN_IF_ERROR(
          Check(cudaStreamWaitEvent(join_stream_, chain_events_[i], 0),
                "cudaStreamWaitEvent"));
    }
    FERRY_RETURN_IF_ERROR(
        Check(cudaEventRecord(native->event()->get(), join_stream_),
              "cudaEventRecord"));
    native->MarkIssued();
    CudaDevice* device = &device_;
    device_.poller().Watch(
        lane_,
        [device, native, waited = std::move(waited)]() -> absl::StatusOr<bool> {
          const cudaError_t error = cudaEventQuery(native->event()->get());
          if (error == cudaErrorNotReady) {
            // An answer, not a failure: leave nothing in the poller's slot.
            IgnoreCudaError(error);
            return false;
          }
          FERRY_RETURN_IF_ERROR(device->Check(error, "cudaEventQuery"));
          // The events waited on are done on the device; signal after their
          // own watches did (a failed one will never signal).
          for (const Event& event : waited) {
            if (!event.IsComplete() && event.timeline()->status().ok()) {
              return false;
            }
          }
          return true;
        },
        [target, value](absl::Status status) {
          if (status.ok()) {
            (void)target->Signal(value);
          } else {
            target->Fail(std::move(status));
          }
        });
    return absl::OkStatus();
  });
  last_native_ = native;
  return Event(target, value, &device_, native);
}

absl::Status CudaBackend::EnqueueWait(const Event& event) {
  FERRY_RETURN_IF_ERROR(device_.sticky_error());
  if (event.IsComplete()) return absl::OkStatus();
  work_since_record_ = true;
  const CudaNativeEvent* native = CudaNativeEvent::Of(event);
  if (native != nullptr && native->issued()) {
    // A CUDA event (of any GPU of the process): wait on the device.
    auto held = std::static_pointer_cast<const CudaNativeEvent>(event.native());
    waited_since_record_.push_back(event);
    issue_->queue.Run([this, held]() -> absl::Status {
      CudaDevice::Scope scope(device_);
      FERRY_RETURN_IF_ERROR(scope.status());
      // Every later operation, on whichever stream, waits; and the next
      // Record() joins every stream, so its event covers the wait.
      for (int i = 0; i < kNumStreams; ++i) {
        FERRY_RETURN_IF_ERROR(
            Check(cudaStreamWaitEvent(streams_[i], held->event()->get(), 0),
                  "cudaStreamWaitEvent"));
        dirty_[i].store(true, std::memory_order_relaxed);
      }
      return absl::OkStatus();
    });
    return absl::OkStatus();
  }
  // A host-side timeline, or a CUDA backend's work still held on the host:
  // hold what follows until the event completes.
  issue_->queue.WaitFor(event);
  return absl::OkStatus();
}

std::shared_ptr<cuda_internal::Fence> CudaBackend::FenceForFree() {
  auto fence = std::make_shared<BackendFence>();
  // In order with the work enqueued so far, even after a failure: if that
  // work is held on the host, so is the fence's recording.
  issue_->queue.RunAlways([this, fence]() -> absl::Status {
    std::vector<std::shared_ptr<PooledCudaEvent>> events;
    CudaDevice::Scope scope(device_);
    if (scope.status().ok()) {
      for (int i = 0; i < kNumStreams; ++i) {
        absl::StatusOr<std::shared_ptr<PooledCudaEvent>> event =
            device_.AcquireEvent();
        if (!event.ok()) break;
        const cudaError_t error = cudaEventRecord((*event)->get(), streams_[i]);
        IgnoreCudaError(error);  // A lost context touches no memory.
        if (error == cudaSuccess) events.push_back(*std::move(event));
      }
    }
    fence->Issue(std::move(events));
    return absl::OkStatus();
  });
  return fence;
}

absl::Status CudaBackend::Synchronize() {
  FERRY_RETURN_IF_ERROR(device_.sticky_error());
  const Event done = Record();
  absl::Status status = done.WaitBlocking();
  issue_->queue.WaitIdle();
  if (status.ok()) return device_.sticky_error();
  // Let work issued before the failure finish, then start a fresh timeline.
  {
    CudaDevice::Scope scope(device_);
    for (cudaStream_t s : streams_) {
      absl::Status synced =
          Check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      if (!synced.ok() && status.ok()) status = synced;
    }
  }
  absl::Status sticky = device_.sticky_error();
  if (!sticky.ok()) return sticky;
  auto fresh = std::make_shared<TimelineSemaphore>();
  {
    std::lock_guard<std::mutex> lock(timeline_mu_);
    timeline_ = fresh;
  }
  last_value_ = 0;
  work_since_record_ = false;
  last_native_.reset();
  issue_->hazards.Clear();  // Every stream is idle.
  issue_->queue.Reset();
  return status;
}

}  // namespace ferry
