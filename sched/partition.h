// Partitioning: which backend runs each tensor of a graph, and how the graph
// is cut into splits (runs of nodes on one backend) with the copies between
// them. Pure functions over the graph's signature and what the backends
// answer (PartitionFacts): no backend is touched, so they are tested with
// tables of facts.
//
// Assignment, in order (ggml's five passes, redesigned):
//   1. user pins; tensors whose memory is already placed go to the first
//      backend using that memory (views follow their source); graph inputs
//      to the CPU; a node reading a weight goes where the weight lives;
//   2. expansion: accelerators spread to unassigned neighbours (down, then
//      up), then any backend does; views never carry an assignment. A node
//      whose weight is in host memory (op offload) joins a neighbouring
//      accelerator only if that one asks for it (OffloadOp), so a head
//      after the last device's layers stays on that device; one no
//      neighbour took goes to the first accelerator that asks, else to the
//      CPU with its weight (ggml sends it to the first one, which makes a
//      pipeline loop back to its first device);
//   3. the rest go to the supporting backend holding most of their inputs
//      (ties to the higher priority), else the first that supports them;
//   3b. a node placed by passes 2-3 whose consumers all run in the run of
//      one backend that comes right after it, and whose sources are read in
//      that run anyway, moves there (onto the CPU only if it does at most a
//      flop per byte it moves): at a pipeline cut, the next stage's first
//      norm runs on that stage, so only the residual crosses, not the
//      residual and its norm (ggml's scheduler sends both);
//   4. sources without a backend go where their first consumer runs; views
//      follow their owner.
// Splits: a node starts a new split when its backend differs from the
// current split's, when it reads a weight from another backend that is not
// copied yet, or when max_split_inputs would be exceeded.
// Lanes: each split runs on a lane, a stream of its backend. Adjacent
// splits of one backend share a lane; a backend that comes back later in
// the graph (the CPU computing the embedding and the head) gets a second
// lane for everything after its first run, so that batch k + 1's first
// stage does not queue behind batch k's last one on an in-order stream.
// Lanes share no activation memory.
// Every source computed on another lane (and every user input, so callers
// may overwrite theirs at once) is copied once per destination lane and
// reused by later splits there.
#ifndef FERRY_SCHED_PARTITION_H_
#define FERRY_SCHED_PARTITION_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ferry/alloc/graph_signature.h"
#include "ferry/backends/buffer.h"

namespace ferry {

// Why a tensor went to its backend (see Scheduler::DescribeAssignment).
enum class AssignReason : uint8_t {
  kNone,
  kPinned,             // SetTensorBackend.
  kBuffer,             // Already in a buffer this backend uses.
  kViewSource,         // A view follows its source.
  kWeight,             // Uses a weight that lives on this backend.
  kOffload,            // Weight in host memory; this backend asked for the op.
  kGraphInput,         // Graph inputs go to the CPU.
  kExpandAccel,        // Joined a neighbouring node of a non-fallback backend.
  kExpandAny,          // Joined a neighbouring node.
  kMostInputs,         // The backend holding most of its inputs.
  kFirstSupports,      // The first backend that supports the op.
  kConsumer,           // A source placed where its first consumer runs.
  kPulledToConsumers,  // Moved to its consumers' run (pass 3b).
};

const char* AssignReasonName(AssignReason reason);

// What partitioning asks of the backends, by index in priority order (the
// last is the CPU). The callbacks may memoize; they are asked at most once
// per (backend, tensor) per call.
struct PartitionFacts {
  int num_backends = 0;
  // Whether backend b computes node i (a number of the signature).
  absl::FunctionRef<bool(int b, int i)> supports;
  // Whether backend b asks for node i although its weight is in host memory.
  absl::FunctionRef<bool(int b, int i)> offload;
  // Whether backend b's ops use memory of `type` directly.
  absl::FunctionRef<bool(int b, const BufferType* type)> uses_buffer_type;
  // Names for errors ("sim0"), by backend.
  absl::FunctionRef<std::string(int b)> name;
};

struct PartitionOptions {
  bool op_offload = true;
  int max_split_inputs = 0;  // 0: no limit.
};

// A copy of `source` (a number of the signature, on `src_backend`, computed
// on lane `src_lane` or by no split: -1) made on `dst_lane` of
// `dst_backend` for every batch.
struct InputCopy {
  int source = -1;
  int src_backend = -1;
  int src_lane = -1;
  int dst_backend = -1;
  int dst_lane = -1;
  bool user_input = false;  // A graph input: written from host memory.
};

// A stream of a backend. The first lane of each backend is the backend.
struct Lane {
  int backend = -1;
  int index = 0;  // Among its backend's lanes.
};

struct Split {
  int backend = -1;
  int lane = -1;
  int first_node = 0;  // Range of node numbers.
  int end_node = 0;
  int inputs_begin = 0;  // Range in Partition::split_inputs: the copies
  int inputs_end = 0;    // this split makes before it runs.
};

// Node `node` reads copy `copy` through its source slot `src`.
struct Rewire {
  int node = -1;
  int src = -1;
  int copy = -1;
};

struct Partition {
  std::vector<int> backend;  // Per tensor number.
  std::vector<AssignReason> reason;
  std::vector<Split> splits;
  std::vector<InputCopy> copies;
  std::vector<int> split_inputs;  // Copy indices, grouped by split.
  std::vector<Rewire> rewires;    // In node order.
  std::vector<Lane> lanes;
  std::vector<int> node_lane;  // Per node number; -1 for nodes not computed.
  std::vector<int> scratch;    // CutSplits' own, kept for its capacity.
};

// Pass 1-4 above. `pins` are (tensor number, backend). Fails with
// Unimplemented naming the node when no backend runs it, and
// InvalidArgument for memory no backend uses or a source outside the graph.
absl::Status AssignBackends(const GraphSignature& signature,
                            const PartitionFacts& facts,
                            const PartitionOptions& options,
                            absl::Span<const std::pair<int, int>> pins,
                            Partition& out);

// Cuts the assigned graph into splits and lists the copies. Fails with
// ResourceExhausted when one node alone needs more than max_split_inputs.
absl::Status CutSplits(const GraphSignature& signature,
                       const PartitionOptions& options, Partition& out);

// One line per tensor: node/leaf, index, op, name, backend, reason.
std::string DescribeAssignment(const GraphSignature& signature,
                               const Partition& partition,
                               const std::vector<std::string>& backend_names);
// One line per split: backend, node range, inputs with their sources.
std::string DescribeSplits(const GraphSignature& signature,
                           const Partition& partition,
                           const std::vector<std::string>& backend_names);

}  // namespace ferry

#endif  // FERRY_SCHED_PARTITION_H_
