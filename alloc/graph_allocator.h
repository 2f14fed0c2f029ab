// GraphAllocator: plans and places the memory of a graph's activations.
//
// Given a graph and a buffer type per leaf and node (several types in one
// graph for multi-backend graphs), the allocator gives every tensor that has
// no memory yet an address in compute buffers of its type, by liveness: a
// tensor's memory is reused once its last consumer has run; ops that may run
// in place (OpCanRunInPlace) take over their src[0]'s memory when that source
// dies at them (see internal/liveness.h for the exact rules); views share and
// keep alive their source's memory; inputs keep their memory for the whole
// graph and outputs (and nodes nothing reads) are never overwritten. Tensors
// that already have memory (weights, caller-placed tensors) are left alone.
//
// Planning is offline: all lifetimes are known before anything is placed, so
// the planner packs them with greedy best fit under several orders and
// ggml's online allocator, and keeps the smallest plan (internal/planner.h).
//
// Use:
//   GraphAllocator galloc({cpu_type});
//   FERRY_RETURN_IF_ERROR(galloc.Reserve(worst_case_graph));  // Buffers.
//   ...
//   absl::Status s = galloc.Allocate(graph);   // Never grows buffers.
//   if (absl::IsResourceExhausted(s)) {        // Does not fit: caller's call.
//     FERRY_RETURN_IF_ERROR(galloc.Reserve(graph));
//     s = galloc.Allocate(graph);
//   }
//
// Allocate recognises a graph with the signature of a recent plan
// (alloc/graph_signature.h: same ops, shapes, flags, wiring, preset memory)
// and buffer types, and only re-applies that plan's offsets: microseconds
// for a thousand nodes. A caller that keeps a GraphSignature of the graph
// already (the scheduler) passes it, and a graph whose signature has not
// changed since it was planned is recognised without comparing anything.
#ifndef FERRY_ALLOC_GRAPH_ALLOCATOR_H_
#define FERRY_ALLOC_GRAPH_ALLOCATOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/alloc/graph_signature.h"
#include "ferry/alloc/internal/liveness.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/tensor.h"

namespace ferry {

// The buffer type index (into the allocator's types) of each leaf and each
// node, parallel to graph.leafs() and graph.nodes(); an empty span means
// "all type 0". Views live wherever their source lives.
struct BufferAssignment {
  absl::Span<const int> leaf_types;
  absl::Span<const int> node_types;
};

enum class PlanningStrategy : uint8_t {
  kBest,     // All strategies; the smallest plan (default).
  kOffline,  // Greedy best fit with full liveness knowledge only.
  kOnline,   // ggml's online best-fit allocator in execution order only.
};

struct GraphAllocatorOptions {
  // Let ops that may run in place reuse a dying source's memory.
  bool in_place = true;
  PlanningStrategy strategy = PlanningStrategy::kBest;
  // Plans remembered for the fast path (most recently used first).
  int max_cached_plans = 4;
};

// What a plan needs, per buffer type.
struct PlanSummary {
  // Bytes of each chunk (one backing buffer each), per type.
  std::vector<std::vector<int64_t>> chunk_sizes;
  // Sum of chunk_sizes[type].
  std::vector<int64_t> bytes;
  int32_t num_planned = 0;   // Tensors given memory (views not counted).
  int32_t num_in_place = 0;  // Of which reuse a dying source's memory.
  bool fast_path = false;    // Re-applied a cached plan.
};

// Does not take ownership of the buffer types, which must outlive it. Owns
// the compute buffers; tensors it placed point into them and must not be
// used after the allocator is destroyed or a Reserve replaced the buffers.
// Thread-compatible.
class GraphAllocator {
 public:
  explicit GraphAllocator(std::vector<BufferType*> types,
                          GraphAllocatorOptions options = {});
  GraphAllocator(const GraphAllocator&) = delete;
  GraphAllocator& operator=(const GraphAllocator&) = delete;
  ~GraphAllocator();

  // Plans `graph` and makes sure every type has backing buffers big enough
  // for it (one per chunk, each at most the type's max_size, usage
  // kCompute). Buffers never shrink: a buffer already large enough is kept,
  // one too small is released and replaced. Places no tensor. Returns
  // InvalidArgumentError for bad input (a tensor larger than its type's
  // max_size, a cycle, a missing source, a bad assignment),
  // FailedPreconditionError for a weight without memory, and the buffer
  // type's error when an allocation fails; on any error no buffer is left
  // half-made (after a failed allocation the allocator holds no buffers and
  // needs a new Reserve).
  absl::Status Reserve(const Graph& graph, BufferAssignment assignment = {});

  // Places every tensor of `graph` that has no memory, or whose memory is in
  // this allocator's buffers (re-placing a graph is fine), using the reserved
  // buffers only. Returns ResourceExhaustedError ("does not fit the reserved
  // buffers") when they are too small or missing: nothing is placed and the
  // caller decides whether to Reserve again. Other errors as for Reserve; on
  // any error the graph's tensors that were to be placed are left unplaced.
  absl::Status Allocate(const Graph& graph, BufferAssignment assignment = {});
  // The same, with `signature` describing `graph` (its last Update was of
  // this graph); Reserve takes one too.
  absl::Status Allocate(const Graph& graph, BufferAssignment assignment,
                        const GraphSignature& signature);
  absl::Status Reserve(const Graph& graph, BufferAssignment assignment,
                       const GraphSignature& signature);

  // Plans `graph` without buffers and returns what it would need.
  absl::StatusOr<PlanSummary> Measure(const Graph& graph,
                                      BufferAssignment assignment = {}) const;

  // Number of Reserve calls that allocated backing buffers.
  int64_t reserve_count() const { return reserve_count_; }
  // Allocate calls that re-applied a cached plan / had to plan / failed to fit.
  int64_t fast_allocations() const { return fast_allocations_; }
  int64_t planned_allocations() const { return planned_allocations_; }
  int64_t failed_allocations() const { return failed_allocations_; }

  int num_types() const { return static_cast<int>(types_.size()); }
  // Bytes of the backing buffers of `type` (all chunks).
  size_t buffer_size(int type) const;
  // Backing buffers of `type`, one per chunk.
  int num_buffers(int type) const;
  Buffer* buffer(int type, int chunk) const;
  // The plan of the last successful Reserve or Allocate.
  const PlanSummary& last_plan() const { return last_plan_; }

 private:
  struct CachedPlan;

  bool IsOwnBuffer(const Buffer* buffer) const;
  absl::StatusOr<alloc_internal::Liveness> Analyze(
      const Graph& graph, BufferAssignment assignment) const;
  absl::StatusOr<std::unique_ptr<CachedPlan>> MakePlan(
      const Graph& graph, BufferAssignment assignment, bool use_reserved,
      PlanSummary* summary) const;
  CachedPlan* FindCached(const GraphSignature& signature,
                         BufferAssignment assignment);
  absl::Status Apply(const CachedPlan& plan, const Graph& graph);
  void Remember(std::unique_ptr<CachedPlan> plan,
                const GraphSignature& signature, BufferAssignment assignment);

  std::vector<BufferType*> types_;
  GraphAllocatorOptions options_;
  std::vector<std::vector<std::unique_ptr<Buffer>>> buffers_;  // Per type.
  std::vector<const Buffer*> own_buffers_;
  std::vector<std::unique_ptr<CachedPlan>> cache_;
  GraphSignature signature_;  // Of graphs given without one.
  PlanSummary last_plan_;
  int64_t reserve_count_ = 0;
  int64_t fast_allocations_ = 0;
  int64_t planned_allocations_ = 0;
  int64_t failed_allocations_ = 0;
};

}  // namespace ferry

#endif  // FERRY_ALLOC_GRAPH_ALLOCATOR_H_
