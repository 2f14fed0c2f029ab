// Scheduler: runs one graph across several backends, ggml_backend_sched
// redesigned on ferry's coroutine runtime, and keeps them all busy by
// pipelining batches.
//
// Planning (AllocGraph; Submit does it when needed):
//   1. the graph's signature (alloc/graph_signature.h) is compared with the
//      last plan's; when it matches, assignment and splits are reused and
//      the graph allocator re-applies its offsets (a decode loop pays one
//      comparison pass);
//   2. otherwise every tensor gets a backend and the graph is cut into
//      splits with the copies between them (partition.h, pure functions);
//   3. activations are placed by the graph allocator, one buffer type per
//      backend, and the copies in n_copies slots (copy_slots.h).
// The CPU's buffers (activations, copy slots, input staging) are a device's
// pinned host memory whenever a device offers it, as llama.cpp gives the CPU
// the GPU's host buffer type: copies between the CPU and devices are then
// asynchronous and Submit never blocks on a transfer, whatever the
// placement. Weights in pageable host memory that a device reads (op
// offload) are registered with that device (Device::BufferFromHostPointer)
// for the same reason; such buffers must outlive the scheduler or a Reset.
//
// Batches. Submit/ComputeAsync/Compute run the planned graph once with the
// given BatchIo:
//   - inputs (leafs flagged input) are read during the call, before it
//     returns (ComputeAsync: before it returns its Task): from BatchIo, or,
//     for inputs it does not list, from the tensor's own memory. The caller
//     may overwrite them at once; any number of batches may be in flight,
//     from any number of threads or coroutines, each with its own inputs.
//   - outputs (tensors flagged output) listed in BatchIo are written to the
//     caller's host memory when the batch completes, whichever backend
//     computed them; nothing else of a batch is kept (the next batch
//     overwrites activations, outputs included).
// Batches enqueue in the order their calls take a ticket (ComputeAsync: when
// its Task starts) and use slot ticket % n_copies; with n_copies > 1, batch
// k + 1's input copies overlap batch k's compute.
//
// Threads. Submit, ComputeAsync and Compute are thread-safe. ComputeAsync's
// continuations run on SchedulerOptions::executor, else on the caller's
// executor (Executor::Current()) or DefaultExecutor(): never on a device's
// thread, so code after `co_await scheduler.ComputeAsync(...)` may block.
// Everything else (AllocGraph, Reserve, pins, Reset, Synchronize, stats) is
// thread-compatible: call it while no batch is being submitted.
//
// Errors name the batch, the split and its backend ("batch 7: split 3 on
// sim1: ...").
#ifndef FERRY_SCHED_SCHEDULER_H_
#define FERRY_SCHED_SCHEDULER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/alloc/graph_allocator.h"
#include "ferry/alloc/graph_signature.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/event.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/tensor.h"
#include "ferry/runtime/executor.h"
#include "ferry/runtime/task.h"
#include "ferry/runtime/timeline_semaphore.h"
#include "ferry/sched/batch.h"
#include "ferry/sched/copy_slots.h"
#include "ferry/sched/host_registrations.h"
#include "ferry/sched/lane_streams.h"
#include "ferry/sched/partition.h"
#include "ferry/sched/slot_nodes.h"

namespace ferry {

struct SchedulerOptions {
  // Copies of graph inputs and split inputs, so that this many batches can
  // be in flight. 0 picks 4 when there are several backends and all have
  // device-side events (DeviceCaps::events), else 1.
  int n_copies = 0;
  // A split with this many inputs ends early (0: no limit).
  int max_split_inputs = 0;
  // Let a higher-priority backend take an op whose weight is in host memory
  // when its device's OffloadOp says it is worth it.
  bool op_offload = true;
  // Where ComputeAsync resumes; nullptr: the caller's executor.
  Executor* executor = nullptr;
};

// Counters for the last planned graph and since creation.
struct SchedulerStats {
  int64_t graphs_planned = 0;  // Reserve and AllocGraph calls that planned.
  int64_t plans_reused = 0;    // Of which reused the previous plan.
  int64_t batches = 0;
  // Re-reservations forced by a graph that did not fit (after a
  // synchronization); ggml aborts or silently resyncs here.
  int64_t re_reserves = 0;
  int num_splits = 0;
  int num_split_inputs = 0;  // Distinct copies per batch.
  // copies[src][dst] and copy_bytes[src][dst] per batch, by backend index.
  std::vector<std::vector<int64_t>> copies;
  std::vector<std::vector<int64_t>> copy_bytes;
  // Bytes of compute buffers and of copy buffers, per backend.
  std::vector<size_t> compute_bytes;
  std::vector<size_t> copy_buffer_bytes;
  // Host buffers registered with a device (pageable weights read by it).
  int registered_host_buffers = 0;
};

// Called with ask=true for every node ("do you want to see this one?") and,
// for nodes that answered yes, with ask=false once the node is computed and
// its backend synchronized. Returning false from an ask=false call stops the
// graph (Compute returns Cancelled).
using EvalCallback = std::function<bool(Tensor& node, bool ask)>;

class Scheduler {
 public:
  // `backends` in priority order; the last must be a CPU backend. Does not
  // take ownership; they must outlive the scheduler.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      std::vector<Backend*> backends, SchedulerOptions options = {});
  // Waits for every batch in flight, and fails every Submit, Compute and
  // started ComputeAsync still waiting for its turn or a slot with
  // Cancelled, then waits until they have returned: their executors must
  // keep running meanwhile. A ComputeAsync task not started yet must not be
  // started afterwards.
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  int n_copies() const { return slots_.n_copies(); }
  int num_backends() const { return static_cast<int>(backends_.size()); }
  Backend& backend(int i) const { return *backends_[i]; }
  // The buffer type of backend i's activations and copies.
  BufferType* buffer_type(int i) const { return buffer_types_[i]; }

  // Pins `node` to `backend`; never overridden. Cleared by Reset. A pinned
  // weight takes the ops reading it along: with several backends of one
  // device (two CPU stages, each with its own threads), pins say which
  // layers each one runs, since their weights share a buffer type.
  absl::Status SetTensorBackend(const Tensor& node, Backend& backend);
  // The backend `tensor` was assigned in the last plan, or nullptr.
  Backend* GetTensorBackend(const Tensor& tensor) const;

  // Plans a worst-case graph and sizes every buffer for it.
  absl::Status Reserve(const Graph& graph);
  // Assigns, splits and allocates `graph` (see the top of this file). If it
  // does not fit the reserved buffers, synchronizes, re-reserves (counted)
  // and allocates. Assumes, as ggml does, that Device::SupportsOp and
  // OffloadOp answer from the signature's fields only; a graph that differs
  // in places keeps the SupportsOp answers of nodes that, like their
  // sources, did not change.
  absl::Status AllocGraph(const Graph& graph);

  // Enqueues one batch of `graph` (planning it first if it is not the
  // planned graph) and returns an event that completes when its outputs are
  // written. Blocks while every slot is in use.
  absl::StatusOr<Event> Submit(const Graph& graph, const BatchIo& io = {});
  // The same as a Task: captures the inputs now, then awaits its turn and a
  // free slot without blocking, and completes with the batch.
  Task<absl::Status> ComputeAsync(const Graph& graph, BatchIo io = {});
  // Blocking form; honours the eval callback.
  absl::Status Compute(const Graph& graph, const BatchIo& io = {});
  // Waits for every backend.
  absl::Status Synchronize();
  // Forgets the pins and which graph is allocated, and releases host
  // registrations (buffers are kept, and the last plan, for a next graph
  // that matches it).
  void Reset();

  void SetEvalCallback(EvalCallback callback) {
    eval_callback_ = std::move(callback);
  }

  // Introspection.
  int num_splits() const { return static_cast<int>(partition_.splits.size()); }
  const SchedulerStats& stats() const { return stats_; }
  // One line per node: index, op, name, backend, reason.
  std::string DescribeAssignment() const;
  // One line per split: backend, node range, inputs with their sources.
  std::string DescribeSplits() const;

 private:
  std::vector<std::string> BackendNames() const;
  class TurnGuard;
  class CallerGuard;

  Scheduler(std::vector<Backend*> backends, SchedulerOptions options,
            int n_copies);

  // Planning. Describe updates the signature and says whether the current
  // plan holds for `graph`; Adopt rebinds it (it holds) or makes a new one
  // (Replan); Plan does both.
  absl::StatusOr<bool> Describe(const Graph& graph);
  absl::Status Adopt(const Graph& graph, bool holds);
  absl::Status Replan(const Graph& graph);
  absl::Status Plan(const Graph& graph);
  absl::Status PlanPartition();
  absl::Status PlaceCopies();
  absl::Status RegisterHostMemory();
  absl::Status MakeLanes();
  void NoteComputeBytes();
  absl::Status Allocate(const Graph& graph);
  void ForgetChangedSupports();
  bool Supports(int backend, int i);

  // Batches.
  absl::StatusOr<std::unique_ptr<CapturedBatch>> Capture(const Graph& graph,
                                                         const BatchIo& io);
  absl::StatusOr<Event> EnqueueBatch(CapturedBatch& batch, int slot);
  // EnqueueBatch, synchronizing after a failure so the slot is free again.
  absl::StatusOr<Event> EnqueueBatchOrSettle(CapturedBatch& batch, int slot);
  absl::Status EnqueueSplitInputs(CapturedBatch& batch, int split, int slot);
  absl::Status EnqueueOutputs(CapturedBatch& batch, int slot);
  // The stream that downloads `output` (a tensor of the planned graph).
  Backend& OutputStream(const Tensor& output);
  Task<absl::Status> RunBatch(const Graph* graph,
                              std::unique_ptr<CapturedBatch> batch);
  absl::Status ComputeWithCallback(const Graph& graph, const BatchIo& io);
  // Whether `graph` is planned and allocated now. The id, not the address,
  // names the graph: a new graph may be built where an old one lived.
  bool IsCurrent(const Graph& graph) const {
    return graph_ == &graph && graph_id_ == graph.id() && allocated_;
  }

  std::vector<Backend*> backends_;
  SchedulerOptions options_;
  int cpu_ = 0;  // Index of the CPU backend (the last).
  // Per backend: the type of its activations and copies (the CPU's is a
  // device's pinned host memory when one offers it).
  std::vector<BufferType*> buffer_types_;
  BufferType* pinned_type_ = nullptr;  // A device's pinned host memory.

  // Serializes Submit/ComputeAsync's enqueue and plan steps (turns order
  // them; this guards the state they share with concurrent captures).
  std::mutex mu_;

  // Pins by tensor, kept until Reset.
  std::vector<std::pair<const Tensor*, int>> pins_;
  std::vector<std::pair<int, int>> pin_numbers_;  // Of the last plan.
  std::vector<std::pair<int, int>> pin_scratch_;  // Of the graph described.

  // The plan.
  const Graph* graph_ = nullptr;
  uint64_t graph_id_ = 0;  // graph_->id() when it was planned.
  GraphSignature signature_;
  bool plan_valid_ = false;
  bool allocated_ = false;
  bool reserved_ = false;
  bool in_flight_ = false;        // Batches may be running (since Synchronize).
  std::vector<int8_t> supports_;  // [tensor * backends + b]: -1 unknown.
  Partition partition_;
  std::vector<int> leaf_types_;
  std::vector<int> node_types_;
  SlotNodes slot_nodes_;
  // Host buffers registered with a device, kept while the plan uses them.
  HostRegistrations registrations_;
  bool reregister_ = false;  // Reset dropped them; the plan still holds.

  LaneStreams lanes_;
  std::vector<BufferType*> allocator_types_;

  // Memory.
  std::unique_ptr<GraphAllocator> allocator_;
  CopySlots slots_;

  // Batch k's completion is value k on this timeline.
  std::shared_ptr<TimelineSemaphore> batch_timeline_;
  int64_t next_batch_ = 0;  // Batches enqueued.

  // Calls inside Submit, Compute or a started ComputeAsync, which
  // ~Scheduler waits out; `closing_` (also read under mu_) fails new and
  // waiting ones with Cancelled.
  std::mutex callers_mu_;
  std::condition_variable callers_cv_;
  int callers_ ABSL_GUARDED_BY(callers_mu_) = 0;
  std::atomic<bool> closing_{false};

  EvalCallback eval_callback_;
  SchedulerStats stats_;
  int trace_track_ = 0;  // "sched/enqueue" on TraceRecorder::Global().
};

}  // namespace ferry

#endif  // FERRY_SCHED_SCHEDULER_H_
