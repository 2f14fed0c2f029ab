// Scheduler: runs one graph across several backends, ggml_backend_sched
// redesigned on ferry's coroutine runtime.
//
// Given backends in priority order (the last must be the CPU), AllocGraph
//   1. assigns every node to a backend (user pins, tensors already in a
//      buffer, weights, op offload, graph inputs on the CPU, expansion to
//      neighbours, the backend supporting most inputs, then sources follow
//      their consumers) and records why;
//   2. cuts the nodes into splits (runs of nodes on one backend) and lists
//      each split's inputs that live on another backend; an input is copied
//      to a backend once and reused by later splits there; capacities grow,
//      the only limit is the optional max_split_inputs, which starts a new
//      split instead of failing;
//   3. allocates activations with the graph allocator (one buffer type per
//      backend) and split-input copies in per-backend copy buffers, with
//      n_copies slots each.
// Steps 1 and 2 are skipped when the graph matches the previous plan
// exactly, which one pass over the graph checks every time (see
// AllocGraph); a decode loop that rebuilds or reuses the same graph pays
// for that pass and the allocation only.
// Compute then enqueues every split on its backend: copies of split inputs
// are asynchronous (device-side event waits, no host blocking), and with
// n_copies > 1 consecutive batches use consecutive copy slots, so batch k+1's
// input copies overlap batch k's compute. A slot is reused only after the
// event recorded when its previous batch's split finished.
//
// Several batches may be in flight: Submit() returns once the batch is
// enqueued, ComputeAsync() awaits it, Compute() blocks. User inputs (graph
// leafs flagged input) are read when Submit/ComputeAsync starts the batch and
// not after it returns/suspends the first time: their values are copied into
// the batch's slot, so the caller may overwrite them for the next batch.
// Outputs are valid once the batch's event completes, until the next batch
// that writes them.
#ifndef FERRY_SCHED_SCHEDULER_H_
#define FERRY_SCHED_SCHEDULER_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ferry/alloc/graph_allocator.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/event.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/tensor.h"
#include "ferry/runtime/task.h"
#include "ferry/runtime/timeline_semaphore.h"

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
};

// Why a tensor went to its backend (see DescribeAssignment).
enum class AssignReason : uint8_t {
  kNone,
  kPinned,         // SetTensorBackend.
  kBuffer,         // Already in a buffer this backend supports.
  kViewSource,     // A view follows its source.
  kWeight,         // Uses a weight that lives on this backend.
  kOffload,        // Weight in host memory; this backend asked for the op.
  kGraphInput,     // Graph inputs go to the CPU.
  kExpandAccel,    // Joined a neighbouring accelerator node.
  kExpandAny,      // Joined a neighbouring node.
  kMostInputs,     // The backend holding most of its inputs.
  kFirstSupports,  // The first backend that supports the op.
  kConsumer,       // A source placed where its first consumer runs.
};

const char* AssignReasonName(AssignReason reason);

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
};

// Called with ask=true for every node ("do you want to see this one?") and,
// for nodes that answered yes, with ask=false once the node is computed and
// its backend synchronized. Returning false from an ask=false call stops the
// graph (Compute returns Cancelled).
using EvalCallback = std::function<bool(Tensor& node, bool ask)>;

// Thread-compatible: one thread or one coroutine at a time calls it.
class Scheduler {
 public:
  // `backends` in priority order; the last must be a CPU backend. Does not
  // take ownership; they must outlive the scheduler.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      std::vector<Backend*> backends, SchedulerOptions options = {});
  // Waits for every batch in flight.
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  int n_copies() const { return n_copies_; }
  int num_backends() const { return static_cast<int>(backends_.size()); }
  Backend& backend(int i) const { return *backends_[i]; }

  // Pins `node` to `backend`; never overridden. Cleared by Reset.
  absl::Status SetTensorBackend(const Tensor& node, Backend& backend);
  // The backend `tensor` was assigned in the last plan, or nullptr.
  Backend* GetTensorBackend(const Tensor& tensor) const;

  // Plans a worst-case graph and sizes every buffer for it.
  absl::Status Reserve(const Graph& graph);
  // Assigns, splits and allocates `graph`. If it does not fit the reserved
  // buffers, synchronizes, re-reserves (counted in stats) and allocates.
  //
  // Assignment and splits are reused from the previous plan (stats:
  // plans_reused) when every tensor of `graph`, in order, has the same op,
  // op params, dtype, shape, strides, flags, view offset, sources and view
  // source (as positions in the graph) and external buffer (pointer, type
  // and usage) as the previous plan's, and the pins on its tensors are the
  // same; the tensors themselves may be new objects. Memory the scheduler's
  // own compute buffers gave a tensor counts as no memory, here and for
  // assignment. Assumes, as ggml does, that Device::SupportsOp and OffloadOp
  // answer from those fields only. A graph that differs in places (a longer
  // KV view) is planned again, but keeps the SupportsOp answers of nodes
  // that, like their sources, did not change.
  absl::Status AllocGraph(const Graph& graph);

  // Enqueues the last allocated graph as one batch (AllocGraph first if it
  // was not allocated). Returns an event that completes when the batch's
  // outputs are written.
  absl::StatusOr<Event> Submit(const Graph& graph);
  // Submit, awaiting free copy slots instead of blocking, then awaits the
  // batch. Any number may be in flight: batches are enqueued in call order
  // (a caller awaits the previous caller's enqueue, then the completion of
  // the last batch that used its slot), so no two share a slot's copies.
  Task<absl::Status> ComputeAsync(const Graph& graph);
  // Blocking form; honours the eval callback.
  absl::Status Compute(const Graph& graph);
  // Waits for every backend.
  absl::Status Synchronize();
  // Forgets the pins and which graph is allocated (buffers are kept, and
  // the last plan, for a next graph that matches it).
  void Reset();

  void SetEvalCallback(EvalCallback callback) {
    eval_callback_ = std::move(callback);
  }

  // Introspection.
  int num_splits() const { return static_cast<int>(splits_.size()); }
  const SchedulerStats& stats() const { return stats_; }
  // One line per node: index, op, name, backend, reason.
  std::string DescribeAssignment() const;
  // One line per split: backend, node range, inputs with their sources.
  std::string DescribeSplits() const;

 private:
  // Plans are rebuilt for every graph, so they live in flat arrays that
  // keep their capacity: no allocation per split or per copy.
  struct InputCopy {
    Tensor* source = nullptr;  // The original tensor (another backend's).
    int source_index = -1;     // Its index in tensors_.
    int src_backend = -1;
    int dst_backend = -1;
    bool user_input = false;  // A graph input: copied synchronously.
  };
  struct Split {
    int backend = -1;
    int first_node = 0;  // Range in the graph's node order.
    int end_node = 0;
    int inputs_begin = 0;  // Range in split_inputs_ (copies issued here).
    int inputs_end = 0;
    int nodes_begin = 0;  // Range in each slot_nodes_[slot].
    int nodes_end = 0;
  };

  // The copy of input `index` for `slot`.
  Tensor* CopySlot(int index, int slot) {
    return &copy_storage_[static_cast<size_t>(index) * n_copies_ + slot];
  }
  NodeSpan SplitNodes(const Split& split, int slot) const {
    return NodeSpan(slot_nodes_[slot].data() + split.nodes_begin,
                    split.nodes_end - split.nodes_begin);
  }

  Scheduler(std::vector<Backend*> backends, SchedulerOptions options,
            int n_copies);

  // What the plan of one tensor depends on (pins aside): the previous plan
  // holds while every tensor's key is unchanged.
  struct TensorKey {
    Op op = Op::kNone;
    DType dtype = DType::kF32;
    BufferUsage usage = BufferUsage::kAny;  // Of `buffer`.
    uint32_t flags = 0;
    std::array<int64_t, kMaxDims> ne = {};
    std::array<int64_t, kMaxDims> nb = {};
    int64_t view_offset = 0;
    // Memory placed by the user (null for none or the scheduler's own).
    const Buffer* buffer = nullptr;
    const BufferType* buffer_type = nullptr;
    std::array<int32_t, kMaxOpParams> op_params = {};  // If it computes.
  };
  // The wiring of one tensor, by index in tensors_ (-1: none), and what
  // planning asks of it; part of the key too.
  enum Kind : uint8_t {
    kKindComputes = 1,   // An op that is not a view.
    kKindViewOp = 2,     // view, reshape, permute, transpose.
    kKindUserInput = 4,  // A leaf flagged input.
    kKindWeight = 8,     // In a weights buffer, or flagged weight.
  };
  struct Topo {
    std::array<int32_t, kMaxSrc> src = {-1, -1, -1, -1};
    int32_t view_src = -1;
    int32_t owner = -1;  // The tensor whose memory it uses: view_src or itself.
    uint8_t kind = 0;
  };

  absl::Status Plan(const Graph& graph);
  // Numbers the graph's tensors and updates tensors_, keys_, topo_ and
  // pin_keys_; sets *match when the previous plan still holds, and *rebind
  // when it holds for other tensor objects. Fails for a source outside the
  // graph.
  absl::Status NumberAndMatch(const Graph& graph, bool* match, bool* rebind);
  // Whether keys_[i] and topo_[i] describe `t` (with external `buffer`).
  bool KeyMatches(size_t i, const Tensor& t, const Buffer* buffer,
                  bool computes) const;
  // Records `t` as tensor i; fails for a source outside the graph.
  absl::Status WriteKey(size_t i, const Tensor& t, const Buffer* buffer,
                        bool computes);
  // Clears the SupportsOp answers that no longer hold (all of them unless
  // the keys were comparable).
  void ForgetChangedSupports();
  absl::Status AssignBackends(int n_nodes);
  absl::Status BuildSplits(const Graph& graph);
  // Builds the per-slot node lists (clones reading copies) from the splits.
  void BuildSlotNodes(const Graph& graph);
  absl::Status AllocateCopies();
  absl::Status PrepareSubmit(const Graph& graph);
  absl::StatusOr<Event> EnqueueBatch(int slot);
  absl::Status ComputeWithCallback(const Graph& graph);

  // Whether backend `backend` runs tensors_[i] (asked once per plan).
  bool Supports(int backend, int i);
  // The first backend using buffers of `type` (and running tensors_[node]
  // if node >= 0), or -1.
  int BackendOfBuffer(const BufferType* type, int node);

  std::vector<Backend*> backends_;
  SchedulerOptions options_;
  const int n_copies_;
  int cpu_ = 0;  // Index of the CPU backend (the last).

  // Pins by tensor, kept until Reset.
  std::vector<std::pair<const Tensor*, int>> pins_;

  // Plan of the current graph. Tensors are numbered through scratch_index:
  // nodes 0..n-1, then leafs.
  const Graph* graph_ = nullptr;
  std::vector<Tensor*> tensors_;
  std::vector<int> tensor_backend_;
  std::vector<AssignReason> reasons_;
  std::vector<int8_t> supports_;  // [tensor * backends + b]: -1 unknown.
  std::vector<InputCopy> input_copies_;
  std::vector<Split> splits_;
  std::vector<int> split_inputs_;
  // Nodes to compute for each slot (clones where a source is a copy).
  std::vector<std::vector<Tensor*>> slot_nodes_;
  std::vector<Tensor> clone_storage_;
  std::vector<Tensor> copy_storage_;
  std::vector<size_t> copy_bytes_;  // Aligned bytes of one copy of each.
  // keys_[i]: tensors_[i]'s key in the last plan; pin_keys_: its pins as
  // (index, backend). plan_valid_: they describe the plan held now.
  std::vector<TensorKey> keys_;
  std::vector<Topo> topo_;
  // changed_[i]: tensor i's key differed from the previous plan's, which
  // comparable_ says could be compared (same tensor count, valid plan).
  std::vector<uint8_t> changed_;
  bool comparable_ = false;
  // Keys from this index on were not compared (most of the graph differed)
  // and count as changed.
  size_t compared_end_ = 0;
  std::vector<int> votes_;
  std::vector<std::pair<int, int>> pin_keys_;
  std::vector<std::pair<int, int>> pin_scratch_;
  bool plan_valid_ = false;
  bool copies_placed_ = false;  // copy_storage_ placed for this plan.
  bool allocated_ = false;
  bool in_flight_ = false;  // Batches may be running (since Synchronize).
  bool reserved_ = false;

  // Memory.
  std::unique_ptr<GraphAllocator> allocator_;
  std::vector<BufferType*> buffer_types_;              // Distinct types.
  std::vector<int> backend_type_;                      // Backend -> type index.
  std::vector<std::unique_ptr<Buffer>> copy_buffers_;  // Per backend.
  // Host staging for user inputs bound for device memory, per backend, and
  // the staging address of each (input, slot), or null.
  std::vector<std::unique_ptr<Buffer>> staging_buffers_;
  std::vector<void*> staging_;
  std::vector<int> leaf_types_;
  std::vector<int> node_types_;

  // copy_of_[backend][tensor]: index into input_copies_, or -1.
  std::vector<std::vector<int>> copy_of_;
  // clone_of_[node * n_copies + slot]: the node's clone for that slot.
  std::vector<Tensor*> clone_of_;
  // Node `node` reads input copy `copy` through its source `src`.
  struct Rewire {
    int node;
    int src;
    int copy;
  };
  std::vector<Rewire> rewires_;

  // Pipelining: each Submit/ComputeAsync takes a ticket; ticket t uses slot
  // t % n_copies and enqueues once slot_turn_ reaches t (tickets before it
  // have enqueued or failed), then raises it to t + 1. slot_events_[slot]
  // are the per-backend events of the last batch that used the slot, which
  // must complete before the slot's copies are rewritten.
  class TurnGuard;
  int64_t next_batch_ = 0;      // Batches enqueued.
  int64_t slots_reserved_ = 0;  // Tickets handed out (may run ahead).
  TimelineSemaphore slot_turn_{0};
  std::vector<std::vector<Event>> slot_events_;
  // Batch k's completion is value k on this timeline.
  std::shared_ptr<TimelineSemaphore> batch_timeline_;

  EvalCallback eval_callback_;
  SchedulerStats stats_;
  int trace_track_ = 0;  // "sched/enqueue" on TraceRecorder::Global().
};

}  // namespace ferry

#endif  // FERRY_SCHED_SCHEDULER_H_
