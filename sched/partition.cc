#include "ferry/sched/partition.h"

#include <algorithm>
#include <array>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ferry/graph/op.h"
#include "ferry/graph/op_cost.h"

namespace ferry {

const char* AssignReasonName(AssignReason reason) {
  switch (reason) {
    case AssignReason::kNone:
      return "none";
    case AssignReason::kPinned:
      return "pinned by the user";
    case AssignReason::kBuffer:
      return "already in a buffer of this backend";
    case AssignReason::kViewSource:
      return "view of a tensor on this backend";
    case AssignReason::kWeight:
      return "uses a weight on this backend";
    case AssignReason::kOffload:
      return "weight in host memory; offloaded (device asked for it)";
    case AssignReason::kGraphInput:
      return "graph input";
    case AssignReason::kExpandAccel:
      return "joined a neighbouring node of a backend before the last (the "
             "fallback)";
    case AssignReason::kExpandAny:
      return "joined a neighbouring node";
    case AssignReason::kMostInputs:
      return "backend holding most of its inputs";
    case AssignReason::kFirstSupports:
      return "first backend that supports the op";
    case AssignReason::kConsumer:
      return "placed with its first consumer";
    case AssignReason::kPulledToConsumers:
      return "moved to the run of its consumers, which reads its sources "
             "anyway";
  }
  return "?";
}

namespace {

// Whether `reason` came from a neighbour or a vote, not from the node's own
// memory, weight or pin: such a node may move.
bool Movable(AssignReason reason) {
  return reason == AssignReason::kExpandAccel ||
         reason == AssignReason::kExpandAny ||
         reason == AssignReason::kMostInputs ||
         reason == AssignReason::kFirstSupports;
}

// Pass 3b (see partition.h). Walks the nodes backwards, keeping the next
// computing node and the end of its backend's run, so that a chain of such
// nodes moves one by one.
void PullToConsumers(const GraphSignature& sig, const PartitionFacts& facts,
                     Partition& out) {
  using Kind = GraphSignature::Kind;
  if (facts.num_backends < 2) return;
  const int n_nodes = static_cast<int>(sig.num_nodes());
  auto owner_of = [&](int i) { return sig.wiring(i).owner; };
  // Consumers of each node (by owner: a read through a view reads the
  // owner), as ranges of one array.
  std::vector<int> begin(static_cast<size_t>(n_nodes) + 1, 0);
  for (int k = 0; k < n_nodes; ++k) {
    if (!sig.Has(k, Kind::kKindComputes)) continue;
    for (const int32_t src : sig.wiring(k).src) {
      if (src >= 0 && owner_of(src) < n_nodes) ++begin[owner_of(src) + 1];
    }
  }
  for (int i = 0; i < n_nodes; ++i) begin[i + 1] += begin[i];
  std::vector<int> consumers(static_cast<size_t>(begin[n_nodes]));
  std::vector<int> fill(begin.begin(), begin.end() - 1);
  for (int k = 0; k < n_nodes; ++k) {
    if (!sig.Has(k, Kind::kKindComputes)) continue;
    for (const int32_t src : sig.wiring(k).src) {
      if (src >= 0 && owner_of(src) < n_nodes) {
        consumers[fill[owner_of(src)]++] = k;
      }
    }
  }
  // Whether a node in (from, to) on backend b reads `node`.
  auto consumed_in = [&](int node, int b, int from, int to) {
    for (int c = begin[node]; c < begin[node + 1]; ++c) {
      const int k = consumers[c];
      if (k > from && k < to && out.backend[k] == b) {
        return true;
      }
    }
    return false;
  };

  int next = -1;     // The next computing node after i.
  int run_end = -1;  // Where the run of next's backend that holds it ends.
  for (int i = n_nodes - 1; i >= 0; --i) {
    if (!sig.Has(i, Kind::kKindComputes)) continue;
    const int b = next >= 0 ? out.backend[next] : -1;
    bool move = b >= 0 && b != out.backend[i] && Movable(out.reason[i]) &&
                begin[i + 1] > begin[i];
    // Every consumer in that run...
    for (int c = begin[i]; move && c < begin[i + 1]; ++c) {
      const int k = consumers[c];
      move = out.backend[k] == b && k < run_end;
    }
    // ... and every source there already, or read in that run anyway.
    for (const int32_t src : sig.wiring(i).src) {
      if (!move || src < 0) continue;
      const int owner = owner_of(src);
      move = out.backend[owner] == b ||
             (owner < n_nodes && consumed_in(owner, b, i, run_end));
    }
    // Onto the fallback (the CPU) only a node whose work is its memory
    // traffic (at most a flop per byte), which costs about what the copy it
    // saves did: an accelerator keeps anything heavier.
    const bool fallback = b == facts.num_backends - 1;
    if (move && fallback) {
      move = OpFlops(*sig.tensor(i)) <= OpBytes(*sig.tensor(i));
    }
    if (move && facts.supports(b, i)) {
      out.backend[i] = b;
      out.reason[i] = AssignReason::kPulledToConsumers;
    }
    if (next < 0) {
      run_end = n_nodes;
    } else if (out.backend[i] != out.backend[next]) {
      run_end = next;
    }
    next = i;
  }
}

}  // namespace

absl::Status AssignBackends(const GraphSignature& sig,
                            const PartitionFacts& facts,
                            const PartitionOptions& options,
                            absl::Span<const std::pair<int, int>> pins,
                            Partition& out) {
  using Kind = GraphSignature::Kind;
  const int n = static_cast<int>(sig.size());
  const int n_nodes = static_cast<int>(sig.num_nodes());
  const int nb = facts.num_backends;
  const int cpu = nb - 1;
  out.backend.assign(static_cast<size_t>(n), -1);
  out.reason.assign(static_cast<size_t>(n), AssignReason::kNone);
  auto assign = [&](int i, int b, AssignReason reason) {
    out.backend[i] = b;
    out.reason[i] = reason;
  };
  auto unassigned = [&](int i) { return out.backend[i] < 0; };
  auto owner_of = [&](int i) { return sig.wiring(i).owner; };
  // The first backend using memory of `type` (and running node, if >= 0).
  auto backend_of_buffer = [&](const BufferType* type, int node) {
    for (int b = 0; b < nb; ++b) {
      if (!facts.uses_buffer_type(b, type)) continue;
      if (node >= 0 && !facts.supports(b, node)) continue;
      return b;
    }
    return -1;
  };
  for (int i = 0; sig.has_externals() && i < n; ++i) {
    const GraphSignature::Wiring& w = sig.wiring(i);
    if (w.view_src == GraphSignature::kExternal ||
        std::find(w.src.begin(), w.src.end(), GraphSignature::kExternal) !=
            w.src.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", sig.tensor(i)->name,
          "' reads a tensor that is not in the graph (build graphs with "
          "Graph::Build)"));
    }
  }

  // Nodes reading a weight in host memory that an accelerator may take.
  std::vector<uint8_t> offload_candidate(static_cast<size_t>(n), 0);
  // Pass 1: pins, tensors in buffers, inputs, weights (with offload).
  for (const auto& [i, b] : pins) assign(i, b, AssignReason::kPinned);
  for (int i = 0; i < n; ++i) {
    if (!unassigned(i)) continue;
    const bool computes = sig.Has(i, Kind::kKindComputes);
    const GraphSignature::Key& owner_key = sig.key(owner_of(i));
    if (owner_key.buffer != nullptr) {
      // A view of a pinned tensor (a write into a pinned KV cache) stays
      // with it; else the first backend using the memory.
      const int pinned = owner_of(i) != i ? out.backend[owner_of(i)] : -1;
      const int b =
          pinned >= 0 && (!computes || facts.supports(pinned, i))
              ? pinned
              : backend_of_buffer(owner_key.buffer_type, computes ? i : -1);
      if (b < 0 && !computes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", sig.tensor(i)->name, "' lives in a ",
            owner_key.buffer_type->name(),
            " buffer that none of the scheduler's backends can use"));
      }
      if (b >= 0) {
        assign(i, b,
               owner_of(i) == i ? AssignReason::kBuffer
                                : AssignReason::kViewSource);
        continue;
      }
    }
    if (sig.Has(i, Kind::kKindUserInput)) {
      assign(i, cpu, AssignReason::kGraphInput);
      continue;
    }
    if (!computes) continue;
    for (const int32_t src : sig.wiring(i).src) {
      if (src < 0) continue;
      const int owner = owner_of(src);
      if (!sig.Has(owner, Kind::kKindWeight)) continue;
      // A pinned weight takes its readers along (several backends of one
      // device share its buffer type: the pin says which holds the layer).
      const int wb = out.backend[owner] >= 0
                         ? out.backend[owner]
                         : backend_of_buffer(sig.key(owner).buffer_type, -1);
      if (wb < 0) continue;
      if (wb == cpu && options.op_offload) {
        // Decided after expansion: an accelerator next to it may take it.
        offload_candidate[i] = 1;
        break;
      }
      if (facts.supports(wb, i)) {
        assign(i, wb, AssignReason::kWeight);
        break;
      }
    }
  }

  // Pass 2: expansion. Accelerators spread first (down, then up), then any
  // backend; views are skipped and never carry an assignment.
  // An offload candidate joins a neighbouring accelerator only if that one
  // asks for it (OffloadOp), so the op stays where its activations are (a
  // head after the last device's layers runs on that device, not on the
  // first one).
  auto expand = [&](bool down, bool accelerators_only, AssignReason reason) {
    int current = -1;
    for (int k = 0; k < n_nodes; ++k) {
      const int i = down ? k : n_nodes - 1 - k;
      if (sig.Has(i, Kind::kKindViewOp)) continue;
      const int b = out.backend[i];
      if (b >= 0) {
        current = (accelerators_only && b == cpu) ? -1 : b;
      } else if (current >= 0) {
        const bool wanted = !offload_candidate[i] ||
                            (current != cpu && facts.offload(current, i));
        if (wanted && facts.supports(current, i)) {
          assign(i, current,
                 offload_candidate[i] ? AssignReason::kOffload : reason);
        } else {
          current = -1;
        }
      }
    }
  };
  expand(true, true, AssignReason::kExpandAccel);
  expand(false, true, AssignReason::kExpandAccel);
  // Candidates no neighbour took: the first accelerator that asks for the
  // op, else the CPU with its weight.
  for (int i = 0; i < n_nodes; ++i) {
    if (!offload_candidate[i] || !unassigned(i)) continue;
    for (int b = 0; b < cpu; ++b) {
      if (facts.supports(b, i) && facts.offload(b, i)) {
        assign(i, b, AssignReason::kOffload);
        break;
      }
    }
    if (unassigned(i) && facts.supports(cpu, i)) {
      assign(i, cpu, AssignReason::kWeight);
    }
  }
  // Those taken by an accelerator seed the expansion again.
  expand(true, true, AssignReason::kExpandAccel);
  expand(false, true, AssignReason::kExpandAccel);
  expand(true, false, AssignReason::kExpandAny);
  expand(false, false, AssignReason::kExpandAny);

  // Pass 3: the supporting backend holding most of the inputs, else the
  // first supporting one.
  std::vector<int> votes(static_cast<size_t>(nb), 0);
  for (int i = 0; i < n_nodes; ++i) {
    if (!sig.Has(i, Kind::kKindComputes) || !unassigned(i)) continue;
    std::fill(votes.begin(), votes.end(), 0);
    for (const int32_t src : sig.wiring(i).src) {
      if (src < 0) continue;
      const int sb = out.backend[owner_of(src)];
      if (sb >= 0) ++votes[sb];
    }
    int best = -1;
    for (int b = 0; b < nb; ++b) {
      if (votes[b] > 0 && facts.supports(b, i) &&
          (best < 0 || votes[b] > votes[best])) {
        best = b;
      }
    }
    if (best >= 0) {
      assign(i, best, AssignReason::kMostInputs);
      continue;
    }
    for (int b = 0; b < nb; ++b) {
      if (facts.supports(b, i)) {
        best = b;
        break;
      }
    }
    if (best < 0) {
      const Tensor* node = sig.tensor(i);
      std::vector<std::string> names;
      for (int b = 0; b < nb; ++b) names.push_back(facts.name(b));
      return absl::UnimplementedError(
          absl::StrCat("no backend supports node '", node->name, "' (",
                       OpName(node->op), " ", node->ShapeString(),
                       "); backends: ", absl::StrJoin(names, ", ")));
    }
    assign(i, best, AssignReason::kFirstSupports);
  }

  PullToConsumers(sig, facts, out);

  // Pass 4: sources without a backend go where their first consumer runs;
  // views follow their owner.
  for (int i = 0; i < n_nodes; ++i) {
    if (!sig.Has(i, Kind::kKindComputes)) continue;
    const int b = out.backend[i];
    for (const int32_t src : sig.wiring(i).src) {
      if (src < 0) continue;
      const int owner = owner_of(src);
      if (unassigned(owner)) assign(owner, b, AssignReason::kConsumer);
    }
  }
  for (int i = 0; i < n; ++i) {
    if (!unassigned(i)) continue;
    const int view_src = sig.wiring(i).view_src;
    if (view_src >= 0) {
      const int b = out.backend[view_src];
      assign(i, b >= 0 ? b : cpu, AssignReason::kViewSource);
    } else {
      assign(i, cpu, AssignReason::kConsumer);
    }
  }
  return absl::OkStatus();
}

namespace {
constexpr int kLanesPerBackend = 2;
}  // namespace

absl::Status CutSplits(const GraphSignature& sig,
                       const PartitionOptions& options, Partition& out) {
  using Kind = GraphSignature::Kind;
  const int n_nodes = static_cast<int>(sig.num_nodes());
  const size_t n = sig.size();
  out.copies.clear();
  out.splits.clear();
  out.split_inputs.clear();
  out.rewires.clear();
  out.lanes.clear();
  out.node_lane.assign(static_cast<size_t>(n_nodes), -1);
  // copy_of[lane * n + tensor]: the copy of that tensor on the lane, or -1
  // (scratch kept in `out` so replanning allocates nothing).
  std::vector<int>& copy_of = out.scratch;
  copy_of.clear();
  std::vector<std::vector<int>> lane_ids;  // Per backend, its lanes.
  // The lane whose split computed tensor `i`'s memory, or -1.
  auto lane_of = [&](int i) {
    const int owner = sig.wiring(i).owner;
    return owner < n_nodes ? out.node_lane[owner] : -1;
  };

  Split* current = nullptr;
  for (int k = 0; k < n_nodes; ++k) {
    if (!sig.Has(k, Kind::kKindComputes)) continue;
    const GraphSignature::Wiring& w = sig.wiring(k);
    const int b = out.backend[k];
    // The lane: the current one while the backend stays; a backend's first
    // lane when it first appears; its second lane when it comes back (and
    // for every later return: graphs that alternate between two backends
    // many times get two lanes each, not one per split).
    int lane = current != nullptr && current->backend == b ? current->lane : -1;
    if (lane < 0) {
      if (static_cast<int>(lane_ids.size()) <= b) {
        lane_ids.resize(static_cast<size_t>(b) + 1);
      }
      std::vector<int>& ids = lane_ids[b];
      if (ids.size() >= static_cast<size_t>(kLanesPerBackend)) {
        lane = ids.back();
      } else {
        lane = static_cast<int>(out.lanes.size());
        out.lanes.push_back({b, static_cast<int>(ids.size())});
        ids.push_back(lane);
        copy_of.resize(copy_of.size() + n, -1);
      }
    }
    std::array<int, kMaxSrc> needed;  // Sources of the node needing a copy.
    int n_needed = 0;
    int fresh = 0;
    bool weight_elsewhere = false;
    for (int j = 0; j < kMaxSrc; ++j) {
      const int src = w.src[j];
      if (src < 0) continue;
      const int owner = sig.wiring(src).owner;
      const int sb = out.backend[owner];
      const bool user_input = sig.Has(owner, Kind::kKindUserInput);
      const int src_lane = lane_of(src);
      // Same backend and computed on this lane, or not computed at all
      // (weights, constants): read in place.
      if (sb == b && !user_input && (src_lane < 0 || src_lane == lane)) {
        continue;
      }
      needed[n_needed++] = j;
      if (copy_of[static_cast<size_t>(lane) * n + src] < 0) ++fresh;
      weight_elsewhere = weight_elsewhere || sig.Has(owner, Kind::kKindWeight);
    }
    bool new_split = current == nullptr || current->lane != lane ||
                     (weight_elsewhere && fresh > 0);
    if (!new_split && options.max_split_inputs > 0 &&
        static_cast<int>(out.split_inputs.size()) - current->inputs_begin +
                fresh >
            options.max_split_inputs) {
      new_split = true;
    }
    if (options.max_split_inputs > 0 && fresh > options.max_split_inputs) {
      const Tensor* node = sig.tensor(k);
      return absl::ResourceExhaustedError(absl::StrCat(
          "node '", node->name, "' (", OpName(node->op), ") needs ", fresh,
          " inputs from other backends, above max_split_inputs = ",
          options.max_split_inputs));
    }
    if (new_split) {
      if (current != nullptr) {
        current->end_node = k;
        current->inputs_end = static_cast<int>(out.split_inputs.size());
      }
      out.splits.emplace_back();
      current = &out.splits.back();
      current->backend = b;
      current->lane = lane;
      current->first_node = k;
      current->inputs_begin = static_cast<int>(out.split_inputs.size());
    }
    out.node_lane[k] = lane;
    for (int m = 0; m < n_needed; ++m) {
      const int j = needed[m];
      const int src = w.src[j];
      int& copy = copy_of[static_cast<size_t>(lane) * n + src];
      if (copy < 0) {
        copy = static_cast<int>(out.copies.size());
        const int owner = sig.wiring(src).owner;
        InputCopy input;
        input.source = src;
        input.src_backend = out.backend[owner];
        input.src_lane = lane_of(src);
        input.dst_backend = b;
        input.dst_lane = lane;
        input.user_input = sig.Has(owner, Kind::kKindUserInput);
        out.copies.push_back(input);
        out.split_inputs.push_back(copy);
      }
      out.rewires.push_back({k, j, copy});
    }
  }
  if (current != nullptr) {
    current->end_node = n_nodes;
    current->inputs_end = static_cast<int>(out.split_inputs.size());
  }
  return absl::OkStatus();
}

std::string DescribeAssignment(const GraphSignature& sig,
                               const Partition& partition,
                               const std::vector<std::string>& names) {
  std::string out;
  const size_t n_nodes = sig.num_nodes();
  for (size_t i = 0; i < sig.size(); ++i) {
    const Tensor* t = sig.tensor(i);
    const int b = partition.backend[i];
    absl::StrAppendFormat(&out, "%s %4d %-10s %-24s -> %-8s (%s)\n",
                          i < n_nodes ? "node" : "leaf",
                          static_cast<int>(i < n_nodes ? i : i - n_nodes),
                          std::string(OpName(t->op)),
                          t->name.empty() ? "(unnamed)" : t->name,
                          b >= 0 ? names[b] : std::string("-"),
                          AssignReasonName(partition.reason[i]));
  }
  return out;
}

std::string DescribeSplits(const GraphSignature& sig,
                           const Partition& partition,
                           const std::vector<std::string>& names) {
  std::string out;
  for (size_t s = 0; s < partition.splits.size(); ++s) {
    const Split& split = partition.splits[s];
    absl::StrAppendFormat(&out, "split %zu on %s (lane %d): nodes [%d, %d)", s,
                          names[split.backend],
                          partition.lanes[split.lane].index, split.first_node,
                          split.end_node);
    if (split.inputs_end > split.inputs_begin) out += ", inputs:";
    for (int i = split.inputs_begin; i < split.inputs_end; ++i) {
      const InputCopy& input = partition.copies[partition.split_inputs[i]];
      const Tensor* source = sig.tensor(input.source);
      absl::StrAppendFormat(
          &out, " '%s' from %s (%d bytes)%s",
          source->name.empty()
              ? absl::StrCat(OpName(source->op), " #", input.source)
              : source->name,
          names[input.src_backend], static_cast<int>(source->NumBytes()),
          input.user_input ? " [user input]" : "");
    }
    out += "\n";
  }
  return out;
}

}  // namespace ferry
