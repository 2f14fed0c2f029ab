// Liveness analysis of a graph for the graph allocator.
//
// AnalyzeLiveness turns a graph into the allocation problem the planner
// solves: every tensor that needs memory (a "planned" tensor: no data yet, not
// a view) gets a lifetime in execution steps and an aligned size; tensors
// that may run in place are chained with their dying source into one
// "block" (one address range whose lifetime is the union of its members').
// Steps are node indices 0..N-1; kBeforeGraph (-1) is "set before compute"
// (inputs) and N is "read after compute" (outputs).
//
// Lifetime rules:
//   * A node starts at its own index; a planned leaf at kBeforeGraph (the
//     caller fills it before compute).
//   * It ends at the last node that reads it or any view of it (views share
//     and keep alive their source's memory), at N when it or a view of it is
//     flagged output or is a node no other node reads, and it spans
//     [kBeforeGraph, N] when it or a view of it is flagged input.
//   * In place: node n (OpCanRunInPlace) joins the block of R, the root of
//     its src[0], when R is a planned node of the same buffer type flagged
//     neither input, output nor weight, R's last use is n (so R has no other
//     consumer alive and no live view), n reads R only through src[0], src[0]
//     starts at R's first byte with n's exact layout (ggml_are_same_layout)
//     and n needs exactly as many bytes as R's block (so that in place never
//     holds more memory than separate tensors would).
#ifndef FERRY_ALLOC_INTERNAL_LIVENESS_H_
#define FERRY_ALLOC_INTERNAL_LIVENESS_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/tensor.h"

namespace ferry::alloc_internal {

inline constexpr int32_t kBeforeGraph = -1;
// Source reference of a tensor outside the graph that already has data.
inline constexpr int32_t kExternalRef = -2;
inline constexpr int32_t kNoRef = -1;

enum class RecordKind : uint8_t {
  kPreset,   // Has data already (weights, caller-placed tensors): untouched.
  kPlanned,  // Needs memory from the planner.
  kView,     // Placed at its view source's memory.
};

// One leaf or node. Records are leafs (graph order) then nodes (graph order).
struct TensorRecord {
  Tensor* tensor = nullptr;
  RecordKind kind = RecordKind::kPreset;
  int type = 0;            // Buffer type index.
  int32_t root = kNoRef;   // kView: record of view_src, or kExternalRef.
  int32_t block = kNoRef;  // kPlanned: its block.
  int64_t size = 0;        // kPlanned: bytes, aligned up.
  int32_t start = 0;       // kPlanned: first step.
  int32_t end = 0;         // kPlanned: last step (inclusive).
  bool in_place = false;   // kPlanned: took over its src[0]'s block.
};

// Address range shared by an in-place chain (or a single planned tensor).
struct Block {
  int type = 0;
  int64_t size = 0;
  int32_t start = 0;
  int32_t end = 0;
  int32_t first_record = kNoRef;
};

struct Liveness {
  int32_t num_steps = 0;  // Nodes.
  int32_t num_leafs = 0;
  std::vector<TensorRecord> records;
  std::vector<Block> blocks;
  // Per record, the record index of each src (kNoRef for null, kExternalRef
  // for a preset tensor outside the graph), kMaxSrc per record.
  std::vector<int32_t> src_refs;
};

// Analyzes `graph`. `leaf_types` / `node_types` give each leaf's and node's
// buffer type index into `types` (empty: all 0). `is_preset` says whether a
// non-view tensor already has memory it keeps. `in_place` enables in-place
// chaining. Returns InvalidArgumentError for a type index out of range, a
// planned tensor larger than its type's max_size, a node reading a later
// node (a cycle) or a source missing from the graph that has no data, and
// FailedPreconditionError for a weight without data.
absl::StatusOr<Liveness> AnalyzeLiveness(
    const Graph& graph, absl::Span<BufferType* const> types,
    absl::Span<const int> leaf_types, absl::Span<const int> node_types,
    absl::FunctionRef<bool(const Tensor&)> is_preset, bool in_place);

// Returns `value` rounded up to a multiple of `alignment` (a power of two).
inline int64_t AlignUp(int64_t value, int64_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

// Peak over steps of the bytes of type `type` live at once: over planned
// tensors (in_place false, the strict bound) or over blocks (in_place true).
int64_t PeakLiveBytes(const Liveness& liveness, int type, bool in_place);

}  // namespace ferry::alloc_internal

#endif  // FERRY_ALLOC_INTERNAL_LIVENESS_H_
