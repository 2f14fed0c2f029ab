#include "ferry/backends/sim/internal/sim_backend.h"

#include <cstring>
#include <deque>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ferry/backends/host/kernels/kernels.h"
#include "ferry/backends/node_snapshot.h"
#include "ferry/backends/sim/internal/sim_memory.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/op.h"
#include "ferry/graph/op_cost.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {

using sim_internal::EventTimes;
using sim_internal::SimEngine;
using sim_internal::SimWork;

namespace {

// Nodes prepared for the kernels: a snapshot whose data pointers are the
// engine-side aliases of device memory, and each node's modelled cost.
struct ComputeJob {
  struct Node {
    int64_t flops;
    int64_t bytes;
    int64_t ns;
    std::string span;
  };
  explicit ComputeJob(NodeSnapshot s) : snapshot(std::move(s)) {}
  NodeSnapshot snapshot;
  std::vector<Node> nodes;  // Parallel to snapshot.nodes().
  size_t scratch_bytes = 0;
  int fault_at = -1;  // Index into `nodes` of an injected fault.
};

}  // namespace

SimBackend::SimBackend(SimDevice& device)
    : device_(device), timeline_(std::make_shared<TimelineSemaphore>(0)) {}

Event SimBackend::Submit(SimEngineKind kind, std::vector<Event> waits,
                         SimEngine::Body body) {
  return Submit(device_.engine(kind), std::move(waits), std::move(body));
}

Event SimBackend::Submit(SimEngine& engine, std::vector<Event> waits,
                         SimEngine::Body body) {
  // This backend's previous work first: if it failed, nothing else is
  // waited for.
  std::vector<Event> all;
  all.reserve(1 + pending_.size() + waits.size());
  all.push_back(last_);
  for (Event& event : pending_) all.push_back(std::move(event));
  for (Event& event : waits) all.push_back(std::move(event));
  pending_.clear();
  const uint64_t value = ++last_value_;
  engine.Enqueue(
      std::move(all), std::move(body),
      [timeline = timeline_, value](absl::Status status, int64_t end_ns) {
        if (status.ok()) {
          EventTimes::Global().Note(timeline, value, end_ns);
          (void)timeline->Signal(value);  // Fails only if already failed.
        } else {
          timeline->Fail(std::move(status));
        }
      });
  last_ = Event(timeline_, value, &device_);
  return last_;
}

absl::Status SimBackend::Finish(const Event& event) {
  if (event.WaitBlocking().ok()) return absl::OkStatus();
  return Synchronize();
}

absl::Status SimBackend::EnqueueSetTensor(Tensor& tensor, const void* data,
                                          size_t offset, size_t size) {
  FERRY_ASSIGN_OR_RETURN(char* dst,
                         device_.TensorAlias(tensor, offset, size, "write"));
  if (size == 0) return absl::OkStatus();
  const bool pinned = sim_internal::PinnedRanges::Global().Contains(data, size);
  const SimConfig& config = device_.config();
  const int64_t ns = device_.CopyNanos(
      size, pinned ? config.h2d_bw : config.pageable_h2d_bw());
  const bool fault = device_.TakeCopyFault();
  std::string name =
      absl::StrCat(pinned ? "h2d " : "h2d pageable ", tensor.name);
  std::string fault_message =
      fault ? absl::StrCat(device_.name(), "/h2d: injected fault: copy to '",
                           tensor.name, "'")
            : "";
  Event event = Submit(SimEngineKind::kH2D, {},
                       [dst, data, size, ns, name = std::move(name), fault,
                        fault_message = std::move(fault_message)](
                           std::vector<SimWork>& work) mutable {
                         if (fault) return absl::InternalError(fault_message);
                         std::memmove(dst, data, size);
                         work.push_back(SimWork{std::move(name), ns,
                                                static_cast<int64_t>(size), 0});
                         return absl::OkStatus();
                       });
  // Pageable memory: the host waits for the transfer, as with CUDA.
  return pinned ? absl::OkStatus() : Finish(event);
}

absl::Status SimBackend::EnqueueGetTensor(const Tensor& tensor, void* data,
                                          size_t offset, size_t size) {
  FERRY_ASSIGN_OR_RETURN(char* src,
                         device_.TensorAlias(tensor, offset, size, "read"));
  if (size == 0) return absl::OkStatus();
  const bool pinned = sim_internal::PinnedRanges::Global().Contains(data, size);
  const SimConfig& config = device_.config();
  const int64_t ns = device_.CopyNanos(
      size, pinned ? config.d2h_bw : config.pageable_d2h_bw());
  const bool fault = device_.TakeCopyFault();
  std::string name =
      absl::StrCat(pinned ? "d2h " : "d2h pageable ", tensor.name);
  std::string fault_message =
      fault ? absl::StrCat(device_.name(), "/d2h: injected fault: copy of '",
                           tensor.name, "'")
            : "";
  Event event = Submit(SimEngineKind::kD2H, {},
                       [src, data, size, ns, name = std::move(name), fault,
                        fault_message = std::move(fault_message)](
                           std::vector<SimWork>& work) mutable {
                         if (fault) return absl::InternalError(fault_message);
                         std::memmove(data, src, size);
                         work.push_back(SimWork{std::move(name), ns,
                                                static_cast<int64_t>(size), 0});
                         return absl::OkStatus();
                       });
  return pinned ? absl::OkStatus() : Finish(event);
}

absl::Status SimBackend::EnqueueCopyTensor(Backend& src_backend,
                                           const Tensor& src, Tensor& dst) {
  const auto* src_type =
      src.buffer == nullptr
          ? nullptr
          : dynamic_cast<const SimBufferType*>(src.buffer->type());
  if (src_type == nullptr) {
    return Backend::EnqueueCopyTensor(src_backend, src, dst);
  }
  FERRY_RETURN_IF_ERROR(CheckCopySizes(src, dst));
  const size_t bytes = static_cast<size_t>(src.NumBytes());
  SimDevice& src_device = src_type->sim_device();
  FERRY_ASSIGN_OR_RETURN(char* from,
                         src_device.TensorAlias(src, 0, bytes, "copy"));
  FERRY_ASSIGN_OR_RETURN(char* to, device_.TensorAlias(dst, 0, bytes, "copy"));
  const SimConfig& config = device_.config();
  // Within a device the copy reads and writes device memory; between
  // devices it crosses the slower of the two links.
  const int64_t ns =
      &src_device == &device_
          ? device_.CopyNanos(2 * bytes, config.mem_bw, /*latency=*/false)
          : device_.CopyNanos(
                bytes, std::min(config.d2d_bw, src_device.config().d2d_bw));
  const bool fault = device_.TakeCopyFault();
  std::string name = absl::StrCat(src_device.name(), " ", src.name, " -> ",
                                  device_.name(), " ", dst.name);
  std::string fault_message =
      fault ? absl::StrCat(device_.name(), "/d2d: injected fault: copy of '",
                           src.name, "' to '", dst.name, "'")
            : "";
  // The producer's work so far, device-side: Record() before Submit so a
  // copy within this backend does not wait on itself.
  Event produced = &src_backend == this ? Event() : src_backend.Record();
  Submit(SimEngineKind::kD2D, {std::move(produced)},
         [from, to, bytes, ns, name = std::move(name), fault,
          fault_message =
              std::move(fault_message)](std::vector<SimWork>& work) mutable {
           if (fault) return absl::InternalError(fault_message);
           std::memmove(to, from, bytes);
           work.push_back(
               SimWork{std::move(name), ns, static_cast<int64_t>(bytes), 0});
           return absl::OkStatus();
         });
  return absl::OkStatus();
}

absl::Status SimBackend::EnqueueCompute(NodeSpan nodes) {
  for (const Tensor* node : nodes) {
    if (node == nullptr) continue;  // NodeSnapshot names it.
    FERRY_RETURN_IF_ERROR(device_.CheckOp(*node));
  }
  FERRY_ASSIGN_OR_RETURN(
      NodeSnapshot snapshot,
      NodeSnapshot::Make(nodes, [&](const Tensor& t) -> absl::StatusOr<void*> {
        return device_.TensorAlias(t, 0, static_cast<size_t>(t.NumBytes()),
                                   "compute");
      }));
  auto job = std::make_unique<ComputeJob>(std::move(snapshot));
  for (const Tensor* node : nodes) {
    if (!IsComputeOp(node->op)) continue;
    const int64_t flops = OpFlops(*node);
    const int64_t bytes = OpBytes(*node);
    job->scratch_bytes =
        std::max(job->scratch_bytes, cpu_kernels::ScratchBytes(*node, 1));
    if (job->fault_at < 0 && device_.TakeKernelFault()) {
      job->fault_at = static_cast<int>(job->nodes.size());
    }
    job->nodes.push_back(ComputeJob::Node{
        flops, bytes, device_.KernelNanos(flops, bytes), NodeSpanName(*node)});
  }
  // The snapshot's sources point into `job`, which moves with its pointer.
  SimDevice* device = &device_;
  Submit(SimEngineKind::kCompute, {},
         [device, job = std::move(job)](std::vector<SimWork>& work) {
           cpu_kernels::KernelContext ctx;
           ctx.scratch = device->ComputeScratch(job->scratch_bytes);
           ctx.scratch_bytes = job->scratch_bytes;
           for (size_t i = 0; i < job->nodes.size(); ++i) {
             ComputeJob::Node& node = job->nodes[i];
             if (static_cast<int>(i) == job->fault_at) {
               return absl::InternalError(absl::StrCat(
                   device->name(), "/compute: injected fault: kernel ",
                   node.span));
             }
             cpu_kernels::ComputeNode(*job->snapshot.nodes()[i], 0, 1, ctx);
             work.push_back(SimWork{std::move(node.span), node.ns, node.bytes,
                                    node.flops});
           }
           return absl::OkStatus();
         });
  return absl::OkStatus();
}

Event SimBackend::Record() {
  if (!pending_.empty()) {
    // Waits with no work after them yet: a pure wait makes them part of
    // what the event covers.
    Submit(device_.wait_engine(), {}, nullptr);
  }
  return last_;
}

absl::Status SimBackend::EnqueueWait(const Event& event) {
  pending_.push_back(event);
  return absl::OkStatus();
}

absl::Status SimBackend::Synchronize() {
  absl::Status status = Record().WaitBlocking();
  if (!status.ok()) {
    // Everything after the failure fails at its first wait, without doing
    // any work; start a fresh timeline.
    timeline_ = std::make_shared<TimelineSemaphore>(last_value_);
    last_ = Event();
    pending_.clear();
  }
  return status;
}

}  // namespace ferry
