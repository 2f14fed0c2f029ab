#include "ferry/sched/scheduler.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ferry/graph/op.h"
#include "ferry/runtime/promise.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/trace.h"

namespace ferry {
namespace {

bool IsView(const Tensor& t) { return IsViewOp(t.op); }
bool Computes(const Tensor& t) { return t.op != Op::kNone && !IsView(t); }

bool IsUserInput(const Tensor* t) {
  return t->op == Op::kNone && t->HasFlag(kTensorFlagInput);
}

size_t Align(size_t n, size_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

// Signals `value` on `timeline` once every event has completed (or fails it).
Task<void> SignalWhenDone(std::vector<Event> events,
                          std::shared_ptr<TimelineSemaphore> timeline,
                          uint64_t value) {
  for (const Event& event : events) {
    absl::Status status = co_await event;
    if (!status.ok()) {
      timeline->Fail(status);
      co_return;
    }
  }
  // Batches finish in order on every backend, so a lower value signalled
  // after a higher one is already implied; ignore that error.
  (void)timeline->Signal(value);
}

}  // namespace

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
      return "joined a neighbouring accelerator node";
    case AssignReason::kExpandAny:
      return "joined a neighbouring node";
    case AssignReason::kMostInputs:
      return "backend holding most of its inputs";
    case AssignReason::kFirstSupports:
      return "first backend that supports the op";
    case AssignReason::kConsumer:
      return "placed with its first consumer";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    std::vector<Backend*> backends, SchedulerOptions options) {
  if (backends.empty()) {
    return absl::InvalidArgumentError("scheduler needs at least one backend");
  }
  for (size_t i = 0; i < backends.size(); ++i) {
    if (backends[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("scheduler backend ", i, " is null"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (backends[j] == backends[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "backend '", backends[i]->name(), "' is listed twice"));
      }
    }
  }
  if (backends.back()->device().type() != DeviceType::kCpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("the last scheduler backend must be the CPU, not '",
                     backends.back()->name(), "'"));
  }
  if (options.n_copies < 0 || options.n_copies > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_copies ", options.n_copies, " is outside [0, 64]"));
  }
  if (options.max_split_inputs < 0) {
    return absl::InvalidArgumentError("max_split_inputs must be >= 0");
  }
  // Pipelining needs device-side event waits on every backend.
  bool events = backends.size() > 1;
  for (Backend* backend : backends) {
    events = events && backend->device().props().caps.events;
  }
  const int n_copies = options.n_copies > 0 ? options.n_copies : events ? 4 : 1;
  return std::unique_ptr<Scheduler>(
      new Scheduler(std::move(backends), options, n_copies));
}

Scheduler::Scheduler(std::vector<Backend*> backends, SchedulerOptions options,
                     int n_copies)
    : backends_(std::move(backends)),
      options_(options),
      n_copies_(n_copies),
      cpu_(static_cast<int>(backends_.size()) - 1),
      batch_timeline_(std::make_shared<TimelineSemaphore>(0)),
      trace_track_(TraceRecorder::Global().Track("sched/enqueue")) {
  // One buffer type per distinct default type; backends sharing a type
  // share compute buffers, as in ggml.
  for (Backend* backend : backends_) {
    BufferType* type = backend->default_buffer_type();
    auto it = std::find(buffer_types_.begin(), buffer_types_.end(), type);
    backend_type_.push_back(static_cast<int>(it - buffer_types_.begin()));
    if (it == buffer_types_.end()) buffer_types_.push_back(type);
  }
  allocator_ = std::make_unique<GraphAllocator>(buffer_types_);
  copy_buffers_.resize(backends_.size());
  staging_buffers_.resize(backends_.size());
  slot_events_.resize(n_copies_);
  const size_t n = backends_.size();
  stats_.copies.assign(n, std::vector<int64_t>(n, 0));
  stats_.copy_bytes.assign(n, std::vector<int64_t>(n, 0));
  stats_.compute_bytes.assign(n, 0);
  stats_.copy_buffer_bytes.assign(n, 0);
}

Scheduler::~Scheduler() { (void)Synchronize(); }

absl::Status Scheduler::SetTensorBackend(const Tensor& node, Backend& backend) {
  auto it = std::find(backends_.begin(), backends_.end(), &backend);
  if (it == backends_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backend '", backend.name(), "' is not one of the scheduler's"));
  }
  const int index = static_cast<int>(it - backends_.begin());
  if (Computes(node) && !backend.SupportsOp(node)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot pin '", node.name, "' (", OpName(node.op),
                     ") to '", backend.name(), "', which does not support it"));
  }
  allocated_ = false;
  for (auto& pin : pins_) {
    if (pin.first == &node) {
      pin.second = index;
      return absl::OkStatus();
    }
  }
  pins_.emplace_back(&node, index);
  return absl::OkStatus();
}

Backend* Scheduler::GetTensorBackend(const Tensor& tensor) const {
  if (graph_ == nullptr) return nullptr;
  const int i = tensor.scratch_index;
  if (i < 0 || i >= static_cast<int>(tensors_.size()) ||
      tensors_[i] != &tensor) {
    return nullptr;
  }
  return tensor_backend_[i] < 0 ? nullptr : backends_[tensor_backend_[i]];
}

bool Scheduler::Supports(int backend, int i) {
  int8_t& cached =
      supports_[static_cast<size_t>(i) * backends_.size() + backend];
  if (cached < 0) cached = backends_[backend]->SupportsOp(*tensors_[i]) ? 1 : 0;
  return cached == 1;
}

int Scheduler::BackendOfBuffer(const BufferType* type, int node) {
  for (int b = 0; b < num_backends(); ++b) {
    if (!backends_[b]->device().SupportsBufferType(type)) continue;
    if (node >= 0 && !Supports(b, node)) continue;
    return b;
  }
  return -1;
}

void Scheduler::ForgetChangedSupports() {
  const size_t nb = backends_.size();
  if (!comparable_ || supports_.size() != tensors_.size() * nb) {
    supports_.assign(tensors_.size() * nb, -1);
    return;
  }
  // SupportsOp reads a node and its sources: an answer holds while neither
  // changed (a graph whose KV length grows keeps most of them). Tensors
  // from compared_end_ on all count as changed.
  for (size_t i = 0; i < compared_end_; ++i) {
    const Topo& topo = topo_[i];
    bool changed = changed_[i] != 0 ||
                   (topo.view_src >= 0 && changed_[topo.view_src] != 0);
    for (const int32_t src : topo.src) {
      changed = changed || (src >= 0 && changed_[src] != 0);
    }
    if (changed) std::fill_n(supports_.begin() + i * nb, nb, int8_t{-1});
  }
  std::fill(supports_.begin() + compared_end_ * nb, supports_.end(),
            int8_t{-1});
}

bool Scheduler::KeyMatches(size_t i, const Tensor& t, const Buffer* buffer,
                           bool computes) const {
  const TensorKey& key = keys_[i];
  const Topo& topo = topo_[i];
  // Sources are compared by pointer with the tensor at the recorded index
  // (tensors_ already holds the new graph): the same test as comparing
  // indices, without reading the source tensors. Branch-free: this runs for
  // every tensor of every graph.
  auto tensor_at = [&](int32_t k) -> uintptr_t {
    return k >= 0
               ? reinterpret_cast<uintptr_t>(tensors_[static_cast<size_t>(k)])
               : 0;
  };
  uint64_t diff =
      (static_cast<uint64_t>(key.op) ^ static_cast<uint64_t>(t.op)) |
      (static_cast<uint64_t>(key.dtype) ^ static_cast<uint64_t>(t.dtype)) |
      (key.flags ^ DescriptiveFlags(t)) |
      static_cast<uint64_t>(key.view_offset ^ t.view_offset) |
      (reinterpret_cast<uintptr_t>(key.buffer) ^
       reinterpret_cast<uintptr_t>(buffer)) |
      (tensor_at(topo.view_src) ^ reinterpret_cast<uintptr_t>(t.view_src));
  for (int j = 0; j < kMaxSrc; ++j) {
    diff |= tensor_at(topo.src[j]) ^ reinterpret_cast<uintptr_t>(t.src[j]);
  }
  for (int d = 0; d < kMaxDims; ++d) {
    diff |= static_cast<uint64_t>(key.ne[d] ^ t.ne[d]) |
            static_cast<uint64_t>(key.nb[d] ^ t.nb[d]);
  }
  // Only SupportsOp and OffloadOp read op params, and only of nodes that
  // compute (a view's params are its shape, strides and offset).
  if (computes) {
    for (int p = 0; p < kMaxOpParams; ++p) {
      diff |= static_cast<uint32_t>(key.op_params[p] ^ t.op_params[p]);
    }
  }
  if (buffer != nullptr) {
    diff |= (reinterpret_cast<uintptr_t>(key.buffer_type) ^
             reinterpret_cast<uintptr_t>(buffer->type())) |
            (static_cast<uint64_t>(key.usage) ^
             static_cast<uint64_t>(buffer->usage()));
  }
  return diff == 0;
}

absl::Status Scheduler::WriteKey(size_t i, const Tensor& t,
                                 const Buffer* buffer, bool computes) {
  const size_t n = tensors_.size();
  auto index_of = [&](const Tensor* u) -> int32_t {
    if (u == nullptr) return -1;
    const int32_t k = u->scratch_index;
    return k >= 0 && static_cast<size_t>(k) < n && tensors_[k] == u ? k : -2;
  };
  TensorKey& key = keys_[i];
  Topo& topo = topo_[i];
  key.op = t.op;
  key.dtype = t.dtype;
  key.flags = DescriptiveFlags(t);
  key.ne = t.ne;
  key.nb = t.nb;
  key.view_offset = t.view_offset;
  key.buffer = buffer;
  key.buffer_type = buffer != nullptr ? buffer->type() : nullptr;
  key.usage = buffer != nullptr ? buffer->usage() : BufferUsage::kAny;
  if (computes) key.op_params = t.op_params;
  topo.view_src = index_of(t.view_src);
  for (int j = 0; j < kMaxSrc; ++j) topo.src[j] = index_of(t.src[j]);
  if (topo.view_src == -2 ||
      std::find(topo.src.begin(), topo.src.end(), -2) != topo.src.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t.name,
                     "' reads a tensor that is not in the graph (build "
                     "graphs with Graph::Build)"));
  }
  topo.owner = topo.view_src >= 0 ? topo.view_src : static_cast<int32_t>(i);
  topo.kind = 0;
  if (computes) topo.kind |= kKindComputes;
  if (IsView(t)) topo.kind |= kKindViewOp;
  if (IsUserInput(&t)) topo.kind |= kKindUserInput;
  if (buffer != nullptr &&
      (key.usage == BufferUsage::kWeights || t.HasFlag(kTensorFlagWeight))) {
    topo.kind |= kKindWeight;
  }
  return absl::OkStatus();
}

absl::Status Scheduler::NumberAndMatch(const Graph& graph, bool* match_out,
                                       bool* rebind) {
  const size_t n_nodes = static_cast<size_t>(graph.num_nodes());
  const size_t n = n_nodes + static_cast<size_t>(graph.num_leafs());
  // Keys of the previous plan can be compared position by position.
  comparable_ = plan_valid_ && tensors_.size() == n && keys_.size() == n;
  bool match = comparable_;
  bool same_tensors = match;
  *match_out = false;
  *rebind = false;
  tensors_.resize(n);
  keys_.resize(n);
  topo_.resize(n);
  changed_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    Tensor* t = i < n_nodes ? graph.node(static_cast<int64_t>(i))
                            : graph.leafs()[i - n_nodes];
    same_tensors = same_tensors && tensors_[i] == t;
    tensors_[i] = t;
  }
  // Keys that differ are rewritten, which needs every tensor's index; until
  // then each tensor is numbered as it is compared.
  size_t numbered = 0;  // tensors_[0, numbered) carry their index.
  bool comparing = comparable_;
  compared_end_ = comparable_ ? n : 0;
  size_t n_changed = 0;
  for (size_t i = 0; i < n; ++i) {
    Tensor& t = *tensors_[i];
    if (numbered <= i) {
      // Usually already right: reading keeps the line clean.
      if (t.scratch_index != static_cast<int32_t>(i)) {
        t.scratch_index = static_cast<int32_t>(i);
      }
      numbered = i + 1;
    }
    // Memory a graph allocator placed (ours, or another's that may be
    // gone) is placed again: it must not steer the assignment, nor count as
    // a difference, and its buffer must not be read.
    const Buffer* buffer =
        t.buffer != nullptr && HasPresetMemory(t) ? t.buffer : nullptr;
    const bool computes = Computes(t);
    if (comparing && KeyMatches(i, t, buffer, computes)) continue;
    match = false;
    changed_[i] = 1;
    // Most of a different graph differs: stop comparing (what is left
    // counts as changed) rather than compare and then rewrite.
    if (comparing && ++n_changed * 4 > i + 1 && i >= 64) {
      comparing = false;
      compared_end_ = i + 1;
    }
    if (numbered < n) {
      for (size_t k = numbered; k < n; ++k) {
        tensors_[k]->scratch_index = static_cast<int32_t>(k);
      }
      numbered = n;
    }
    if (absl::Status status = WriteKey(i, t, buffer, computes); !status.ok()) {
      plan_valid_ = false;
      return status;
    }
  }
  pin_scratch_.clear();
  for (const auto& [tensor, b] : pins_) {
    const int32_t i = tensor->scratch_index;
    if (i >= 0 && static_cast<size_t>(i) < n && tensors_[i] == tensor) {
      pin_scratch_.emplace_back(i, b);
    }
  }
  match = match && pin_scratch_ == pin_keys_;
  pin_keys_.swap(pin_scratch_);
  *rebind = match && !same_tensors;
  *match_out = match;
  return absl::OkStatus();
}

absl::Status Scheduler::AssignBackends(int n_nodes) {
  const int n = static_cast<int>(tensors_.size());
  const int nb = num_backends();
  auto assign = [&](int i, int b, AssignReason reason) {
    tensor_backend_[i] = b;
    reasons_[i] = reason;
  };
  auto unassigned = [&](int i) { return tensor_backend_[i] < 0; };

  // Pass 1: pins, tensors in buffers, weights (with offload), inputs.
  for (const auto& [i, b] : pin_keys_) assign(i, b, AssignReason::kPinned);
  for (int i = 0; i < n; ++i) {
    if (!unassigned(i)) continue;
    const Topo& topo = topo_[i];
    const bool computes = (topo.kind & kKindComputes) != 0;
    const TensorKey& owner_key = keys_[topo.owner];
    if (owner_key.buffer != nullptr) {
      const int b = BackendOfBuffer(owner_key.buffer_type, computes ? i : -1);
      if (b < 0 && !computes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", tensors_[i]->name, "' lives in a ",
            owner_key.buffer_type->name(),
            " buffer that none of the scheduler's backends can use"));
      }
      if (b >= 0) {
        assign(i, b,
               topo.owner == i ? AssignReason::kBuffer
                               : AssignReason::kViewSource);
        continue;
      }
    }
    if (topo.kind & kKindUserInput) {
      assign(i, cpu_, AssignReason::kGraphInput);
      continue;
    }
    if (!computes) continue;
    for (const int32_t src : topo.src) {
      if (src < 0) continue;
      const int owner = topo_[src].owner;
      if (!(topo_[owner].kind & kKindWeight)) continue;
      const int wb = BackendOfBuffer(keys_[owner].buffer_type, -1);
      if (wb < 0) continue;
      if (wb == cpu_ && options_.op_offload) {
        for (int b = 0; b < cpu_; ++b) {
          if (Supports(b, i) &&
              backends_[b]->device().OffloadOp(*tensors_[i])) {
            assign(i, b, AssignReason::kOffload);
            break;
          }
        }
        if (!unassigned(i)) break;
      }
      if (Supports(wb, i)) {
        assign(i, wb, AssignReason::kWeight);
        break;
      }
    }
  }

  // Pass 2: expansion. Accelerators spread first (down, then up), then any
  // backend; views are skipped and never carry an assignment. Nodes are
  // tensors [0, n_nodes), in graph order.
  auto expand = [&](bool down, bool accelerators_only, AssignReason reason) {
    int current = -1;
    for (int k = 0; k < n_nodes; ++k) {
      const int i = down ? k : n_nodes - 1 - k;
      if (topo_[i].kind & kKindViewOp) continue;
      const int b = tensor_backend_[i];
      if (b >= 0) {
        current = (accelerators_only && b == cpu_) ? -1 : b;
      } else if (current >= 0) {
        if (Supports(current, i)) {
          assign(i, current, reason);
        } else {
          current = -1;
        }
      }
    }
  };
  expand(true, true, AssignReason::kExpandAccel);
  expand(false, true, AssignReason::kExpandAccel);
  expand(true, false, AssignReason::kExpandAny);
  expand(false, false, AssignReason::kExpandAny);

  // Pass 3: what is left goes to the supporting backend holding most of its
  // inputs (ties to the higher priority), else the first supporting one.
  votes_.assign(nb, 0);
  for (int i = 0; i < n_nodes; ++i) {
    if (!(topo_[i].kind & kKindComputes) || !unassigned(i)) continue;
    std::fill(votes_.begin(), votes_.end(), 0);
    for (const int32_t src : topo_[i].src) {
      if (src < 0) continue;
      const int sb = tensor_backend_[topo_[src].owner];
      if (sb >= 0) ++votes_[sb];
    }
    int best = -1;
    for (int b = 0; b < nb; ++b) {
      if (votes_[b] > 0 && Supports(b, i) &&
          (best < 0 || votes_[b] > votes_[best])) {
        best = b;
      }
    }
    if (best >= 0) {
      assign(i, best, AssignReason::kMostInputs);
      continue;
    }
    for (int b = 0; b < nb; ++b) {
      if (Supports(b, i)) {
        best = b;
        break;
      }
    }
    if (best < 0) {
      const Tensor* node = tensors_[i];
      std::vector<std::string> names;
      for (Backend* backend : backends_) names.emplace_back(backend->name());
      return absl::UnimplementedError(
          absl::StrCat("no backend supports node '", node->name, "' (",
                       OpName(node->op), " ", node->ShapeString(),
                       "); backends: ", absl::StrJoin(names, ", ")));
    }
    assign(i, best, AssignReason::kFirstSupports);
  }

  // Pass 4: sources without a backend (leafs with no buffer, and the owners
  // of views) go where their first consumer runs; views follow their owner.
  for (int i = 0; i < n_nodes; ++i) {
    if (!(topo_[i].kind & kKindComputes)) continue;
    const int b = tensor_backend_[i];
    for (const int32_t src : topo_[i].src) {
      if (src < 0) continue;
      const int owner = topo_[src].owner;
      if (unassigned(owner)) assign(owner, b, AssignReason::kConsumer);
    }
  }
  for (int i = 0; i < n; ++i) {
    if (!unassigned(i)) continue;
    const int view_src = topo_[i].view_src;
    if (view_src >= 0) {
      const int b = tensor_backend_[view_src];
      assign(i, b >= 0 ? b : cpu_, AssignReason::kViewSource);
    } else {
      assign(i, cpu_, AssignReason::kConsumer);
    }
  }
  return absl::OkStatus();
}

absl::Status Scheduler::BuildSplits(const Graph& graph) {
  const int n_nodes = static_cast<int>(graph.num_nodes());
  const int nb = num_backends();
  // copy_of[b][tensor] = index of the copy of that tensor on backend b.
  copy_of_.resize(nb);
  for (auto& v : copy_of_) v.assign(tensors_.size(), -1);
  input_copies_.clear();
  splits_.clear();
  split_inputs_.clear();
  for (auto& row : stats_.copies) std::fill(row.begin(), row.end(), 0);
  for (auto& row : stats_.copy_bytes) std::fill(row.begin(), row.end(), 0);

  rewires_.clear();

  Split* current = nullptr;
  for (int k = 0; k < n_nodes; ++k) {
    const Topo& topo = topo_[k];
    if (!(topo.kind & kKindComputes)) continue;
    const int b = tensor_backend_[k];
    std::array<int, kMaxSrc> needed;  // Sources of the node needing a copy.
    int n_needed = 0;
    int fresh = 0;
    bool weight_elsewhere = false;
    for (int j = 0; j < kMaxSrc; ++j) {
      const int src = topo.src[j];
      if (src < 0) continue;
      const int owner = topo_[src].owner;
      const int sb = tensor_backend_[owner];
      // User inputs are always copied, so the caller may overwrite them as
      // soon as Submit returns (even with one slot).
      const bool user_input = (topo_[owner].kind & kKindUserInput) != 0;
      if (sb == b && !user_input) continue;
      needed[n_needed++] = j;
      if (copy_of_[b][src] < 0) ++fresh;
      weight_elsewhere =
          weight_elsewhere || (topo_[owner].kind & kKindWeight) != 0;
    }
    bool new_split = current == nullptr || current->backend != b ||
                     (weight_elsewhere && fresh > 0);
    if (!new_split && options_.max_split_inputs > 0 &&
        static_cast<int>(split_inputs_.size()) - current->inputs_begin + fresh >
            options_.max_split_inputs) {
      new_split = true;
    }
    if (new_split) {
      if (current != nullptr) {
        current->end_node = k;
        current->inputs_end = static_cast<int>(split_inputs_.size());
      }
      splits_.emplace_back();
      current = &splits_.back();
      current->backend = b;
      current->first_node = k;
      current->inputs_begin = static_cast<int>(split_inputs_.size());
    }
    if (options_.max_split_inputs > 0 && fresh > options_.max_split_inputs) {
      const Tensor* node = tensors_[k];
      return absl::ResourceExhaustedError(absl::StrCat(
          "node '", node->name, "' (", OpName(node->op), ") needs ", fresh,
          " inputs from other backends, above max_split_inputs = ",
          options_.max_split_inputs));
    }
    for (int m = 0; m < n_needed; ++m) {
      const int j = needed[m];
      const int src = topo.src[j];
      int& copy = copy_of_[b][src];
      if (copy < 0) {
        copy = static_cast<int>(input_copies_.size());
        const int owner = topo_[src].owner;
        InputCopy input;
        input.source = tensors_[src];
        input.source_index = src;
        input.src_backend = tensor_backend_[owner];
        input.dst_backend = b;
        input.user_input = (topo_[owner].kind & kKindUserInput) != 0;
        input_copies_.push_back(input);
        split_inputs_.push_back(copy);
        stats_.copies[input.src_backend][b] += 1;
        stats_.copy_bytes[input.src_backend][b] += input.source->NumBytes();
      }
      rewires_.push_back({k, j, copy});
    }
  }
  if (current != nullptr) {
    current->end_node = n_nodes;
    current->inputs_end = static_cast<int>(split_inputs_.size());
  }

  // Copy tensors: same layout as their source, owned by the scheduler.
  copy_storage_.resize(input_copies_.size() * n_copies_);
  for (size_t i = 0; i < input_copies_.size(); ++i) {
    const Tensor* source = input_copies_[i].source;
    for (int c = 0; c < n_copies_; ++c) {
      Tensor& copy = *CopySlot(static_cast<int>(i), c);
      copy.dtype = source->dtype;
      copy.ne = source->ne;
      copy.nb = source->nb;
      copy.flags = kTensorFlagInput;
      copy.scratch_index = source->scratch_index;
      copy.buffer = nullptr;
      copy.data = nullptr;
    }
  }

  BuildSlotNodes(graph);
  stats_.num_splits = static_cast<int>(splits_.size());
  stats_.num_split_inputs = static_cast<int>(input_copies_.size());
  return absl::OkStatus();
}

void Scheduler::BuildSlotNodes(const Graph& graph) {
  const int n_nodes = static_cast<int>(graph.num_nodes());
  // Per-slot node lists: a node reading a copy is replaced by a clone that
  // reads that slot's copy; the clone shares the node's memory.
  size_t n_clones = 0;
  for (size_t r = 0; r < rewires_.size(); ++r) {
    // Rewires are made in node order, so a node's rewires are adjacent.
    if (r == 0 || rewires_[r].node != rewires_[r - 1].node) ++n_clones;
  }
  clone_of_.assign(static_cast<size_t>(n_nodes) * n_copies_, nullptr);
  clone_storage_.resize(n_clones * n_copies_);
  size_t next_clone = 0;
  for (int c = 0; c < n_copies_; ++c) {
    for (const Rewire& rw : rewires_) {
      Tensor*& clone = clone_of_[static_cast<size_t>(rw.node) * n_copies_ + c];
      if (clone == nullptr) {
        const Tensor* node = graph.node(rw.node);
        clone = &clone_storage_[next_clone++];
        // Copy everything but the name (kept on the original).
        clone->dtype = node->dtype;
        clone->ne = node->ne;
        clone->nb = node->nb;
        clone->op = node->op;
        clone->op_params = node->op_params;
        clone->src = node->src;
        clone->view_src = node->view_src;
        clone->view_offset = node->view_offset;
        clone->flags = node->flags;
        clone->scratch_index = node->scratch_index;
      }
      clone->src[rw.src] = CopySlot(rw.copy, c);
    }
  }
  slot_nodes_.resize(n_copies_);
  for (int c = 0; c < n_copies_; ++c) slot_nodes_[c].clear();
  for (Split& split : splits_) {
    split.nodes_begin = static_cast<int>(slot_nodes_[0].size());
    for (int c = 0; c < n_copies_; ++c) {
      for (int k = split.first_node; k < split.end_node; ++k) {
        if (!(topo_[k].kind & kKindComputes)) continue;
        Tensor* node = graph.node(k);
        Tensor* clone = clone_of_[static_cast<size_t>(k) * n_copies_ + c];
        slot_nodes_[c].push_back(clone != nullptr ? clone : node);
      }
    }
    split.nodes_end = static_cast<int>(slot_nodes_[0].size());
  }
}

absl::Status Scheduler::Plan(const Graph& graph) {
  // Batches in flight compute the current plan's clones and copies, which
  // the new plan rewrites.
  if (in_flight_) FERRY_RETURN_IF_ERROR(Synchronize());
  graph_ = nullptr;
  allocated_ = false;
  bool match = false;
  bool rebind = false;
  FERRY_RETURN_IF_ERROR(NumberAndMatch(graph, &match, &rebind));
  if (match) {
    // Same plan; only pointers to the graph's tensors may need updating.
    if (rebind) {
      for (InputCopy& input : input_copies_) {
        input.source = tensors_[input.source_index];
      }
      BuildSlotNodes(graph);
    }
    graph_ = &graph;
    ++stats_.graphs_planned;
    ++stats_.plans_reused;
    return absl::OkStatus();
  }
  plan_valid_ = false;
  copies_placed_ = false;
  tensor_backend_.assign(tensors_.size(), -1);
  reasons_.assign(tensors_.size(), AssignReason::kNone);
  ForgetChangedSupports();
  FERRY_RETURN_IF_ERROR(AssignBackends(static_cast<int>(graph.num_nodes())));
  FERRY_RETURN_IF_ERROR(BuildSplits(graph));

  leaf_types_.resize(graph.num_leafs());
  node_types_.resize(graph.num_nodes());
  for (int64_t i = 0; i < graph.num_nodes(); ++i) {
    node_types_[i] = backend_type_[tensor_backend_[i]];
  }
  for (int64_t i = 0; i < graph.num_leafs(); ++i) {
    leaf_types_[i] = backend_type_[tensor_backend_[graph.num_nodes() + i]];
  }
  graph_ = &graph;
  plan_valid_ = true;
  ++stats_.graphs_planned;
  return absl::OkStatus();
}

absl::Status Scheduler::AllocateCopies() {
  // The copies are the scheduler's own: placed once per plan.
  if (copies_placed_) return absl::OkStatus();
  std::vector<size_t> need(backends_.size(), 0);
  copy_bytes_.resize(input_copies_.size());
  for (size_t i = 0; i < input_copies_.size(); ++i) {
    const int b = input_copies_[i].dst_backend;
    BufferType* type = backends_[b]->default_buffer_type();
    copy_bytes_[i] = Align(type->AllocSize(*CopySlot(static_cast<int>(i), 0)),
                           type->alignment());
    need[b] += n_copies_ * copy_bytes_[i];
  }
  // User inputs bound for device memory go through per-slot host staging
  // (pinned where the device offers it), so Submit only does a host memcpy
  // and the upload itself is asynchronous.
  std::vector<size_t> staging_need(backends_.size(), 0);
  for (const InputCopy& input : input_copies_) {
    if (!input.user_input) continue;
    if (backends_[input.dst_backend]->default_buffer_type()->is_host())
      continue;
    staging_need[input.dst_backend] +=
        n_copies_ * Align(static_cast<size_t>(input.source->NumBytes()), 64);
  }
  bool synced = false;
  for (size_t b = 0; b < backends_.size(); ++b) {
    if (staging_need[b] == 0) continue;
    if (staging_buffers_[b] != nullptr &&
        staging_buffers_[b]->size() >= staging_need[b]) {
      continue;
    }
    if (staging_buffers_[b] != nullptr && !synced) {
      FERRY_RETURN_IF_ERROR(Synchronize());
      synced = true;
    }
    BufferType* type = backends_[b]->device().host_buffer_type();
    if (type == nullptr) type = backends_[cpu_]->default_buffer_type();
    staging_buffers_[b].reset();
    FERRY_ASSIGN_OR_RETURN(staging_buffers_[b],
                           type->Allocate(staging_need[b]));
  }
  staging_.assign(input_copies_.size() * n_copies_, nullptr);
  std::vector<size_t> staging_offset(backends_.size(), 0);
  for (size_t i = 0; i < input_copies_.size(); ++i) {
    const InputCopy& input = input_copies_[i];
    const int b = input.dst_backend;
    if (!input.user_input || staging_need[b] == 0) continue;
    for (int c = 0; c < n_copies_; ++c) {
      staging_[i * n_copies_ + c] =
          static_cast<char*>(staging_buffers_[b]->base()) + staging_offset[b];
      staging_offset[b] +=
          Align(static_cast<size_t>(input.source->NumBytes()), 64);
    }
  }
  for (size_t b = 0; b < backends_.size(); ++b) {
    if (need[b] == 0) continue;
    if (copy_buffers_[b] != nullptr && copy_buffers_[b]->size() >= need[b]) {
      continue;
    }
    if (copy_buffers_[b] != nullptr && !synced) {
      // Batches in flight may still read the old copies.
      FERRY_RETURN_IF_ERROR(Synchronize());
      synced = true;
    }
    copy_buffers_[b].reset();
    FERRY_ASSIGN_OR_RETURN(
        copy_buffers_[b],
        backends_[b]->default_buffer_type()->Allocate(need[b]));
    copy_buffers_[b]->set_usage(BufferUsage::kCompute);
    stats_.copy_buffer_bytes[b] = need[b];
  }
  std::vector<size_t> offset(backends_.size(), 0);
  for (size_t i = 0; i < input_copies_.size(); ++i) {
    const int b = input_copies_[i].dst_backend;
    for (int c = 0; c < n_copies_; ++c) {
      Tensor* slot = CopySlot(static_cast<int>(i), c);
      slot->buffer = nullptr;
      slot->data = nullptr;
      FERRY_RETURN_IF_ERROR(PlaceTensor(*copy_buffers_[b], *slot, offset[b]));
      offset[b] += copy_bytes_[i];
    }
  }
  copies_placed_ = true;
  return absl::OkStatus();
}

absl::Status Scheduler::Reserve(const Graph& graph) {
  FERRY_RETURN_IF_ERROR(Synchronize());
  FERRY_RETURN_IF_ERROR(Plan(graph));
  BufferAssignment assignment{leaf_types_, node_types_};
  FERRY_RETURN_IF_ERROR(allocator_->Reserve(graph, assignment));
  FERRY_RETURN_IF_ERROR(AllocateCopies());
  reserved_ = true;
  for (size_t b = 0; b < backends_.size(); ++b) {
    stats_.compute_bytes[b] = allocator_->buffer_size(backend_type_[b]);
  }
  graph_ = nullptr;  // Reserve plans only; AllocGraph places.
  return absl::OkStatus();
}

absl::Status Scheduler::AllocGraph(const Graph& graph) {
  FERRY_RETURN_IF_ERROR(Plan(graph));
  BufferAssignment assignment{leaf_types_, node_types_};
  absl::Status status = allocator_->Allocate(graph, assignment);
  if (absl::IsResourceExhausted(status)) {
    // Does not fit: wait for batches in flight (they use the buffers), grow
    // the buffers and place again. Counted, never silent.
    FERRY_RETURN_IF_ERROR(Synchronize());
    if (reserved_) ++stats_.re_reserves;
    FERRY_RETURN_IF_ERROR(allocator_->Reserve(graph, assignment));
    reserved_ = true;
    status = allocator_->Allocate(graph, assignment);
  }
  FERRY_RETURN_IF_ERROR(status);
  FERRY_RETURN_IF_ERROR(AllocateCopies());
  for (Tensor& clone : clone_storage_) {
    const Tensor* original = tensors_[clone.scratch_index];
    clone.buffer = original->buffer;
    clone.data = original->data;
  }
  for (size_t b = 0; b < backends_.size(); ++b) {
    stats_.compute_bytes[b] = allocator_->buffer_size(backend_type_[b]);
  }
  allocated_ = true;
  return absl::OkStatus();
}

absl::Status Scheduler::PrepareSubmit(const Graph& graph) {
  if (graph_ != &graph || !allocated_) {
    FERRY_RETURN_IF_ERROR(AllocGraph(graph));
  }
  return absl::OkStatus();
}

absl::StatusOr<Event> Scheduler::EnqueueBatch(int slot) {
  // Host-side spans (track "sched/enqueue"): the time each split-input copy
  // and each split's compute take to enqueue. Names are built only while
  // recording.
  TraceRecorder& trace = TraceRecorder::Global();
  const bool tracing = trace.enabled();
  std::vector<bool> used(backends_.size(), false);
  std::vector<int> sources;
  for (size_t s = 0; s < splits_.size(); ++s) {
    const Split& split = splits_[s];
    Backend& dst = *backends_[split.backend];
    used[split.backend] = true;
    sources.clear();
    for (int i = split.inputs_begin; i < split.inputs_end; ++i) {
      const int index = split_inputs_[i];
      const InputCopy& input = input_copies_[index];
      Tensor& copy = *CopySlot(index, slot);
      const int64_t begin_ns = tracing ? TraceRecorder::NowNanos() : 0;
      if (input.user_input) {
        // The caller's memory is read now, before Submit returns: straight
        // into host copies, or into host staging then uploaded async.
        void* staging = staging_[static_cast<size_t>(index) * n_copies_ + slot];
        if (staging == nullptr) {
          FERRY_RETURN_IF_ERROR(CopyTensor(*input.source, copy));
        } else {
          const size_t bytes = static_cast<size_t>(input.source->NumBytes());
          FERRY_RETURN_IF_ERROR(
              GetTensorData(*input.source, staging, 0, bytes));
          FERRY_RETURN_IF_ERROR(dst.EnqueueSetTensor(copy, staging, 0, bytes));
        }
      } else {
        Backend& src = *backends_[input.src_backend];
        absl::Status status = dst.EnqueueCopyTensor(src, *input.source, copy);
        if (absl::IsUnimplemented(status)) {
          FERRY_RETURN_IF_ERROR(src.Synchronize());
          status = CopyTensor(*input.source, copy);
        } else if (std::find(sources.begin(), sources.end(),
                             input.src_backend) == sources.end()) {
          sources.push_back(input.src_backend);
        }
        FERRY_RETURN_IF_ERROR(status);
      }
      if (tracing) {
        trace.Record(trace_track_,
                     absl::StrCat("copy ", input.source->name, " ",
                                  backends_[input.src_backend]->name(), "->",
                                  dst.name()),
                     begin_ns, TraceRecorder::NowNanos(),
                     {{"bytes", input.source->NumBytes()},
                      {"split", static_cast<int64_t>(s)},
                      {"slot", slot}});
      }
    }
    if (!sources.empty()) {
      // The producers must not overwrite what the copies read before the
      // copies have run (ggml's missing event sync, #8685).
      const Event copied = dst.Record();
      for (int b : sources)
        FERRY_RETURN_IF_ERROR(backends_[b]->EnqueueWait(copied));
    }
    const int64_t begin_ns = tracing ? TraceRecorder::NowNanos() : 0;
    FERRY_RETURN_IF_ERROR(dst.EnqueueCompute(SplitNodes(split, slot)));
    if (tracing) {
      trace.Record(trace_track_, absl::StrCat("split ", s, " ", dst.name()),
                   begin_ns, TraceRecorder::NowNanos(),
                   {{"nodes", split.nodes_end - split.nodes_begin},
                    {"split", static_cast<int64_t>(s)},
                    {"slot", slot}});
    }
  }
  std::vector<Event> events;
  for (size_t b = 0; b < backends_.size(); ++b) {
    if (used[b]) events.push_back(backends_[b]->Record());
  }
  slot_events_[slot] = events;
  in_flight_ = true;
  const uint64_t value = static_cast<uint64_t>(++next_batch_);
  ++stats_.batches;
  Event done(batch_timeline_, value);
  Detach(SignalWhenDone(std::move(events), batch_timeline_, value));
  return done;
}

// Passes the enqueue turn of `ticket` on when it goes out of scope, once
// the turn was had (see slot_turn_).
class Scheduler::TurnGuard {
 public:
  TurnGuard(TimelineSemaphore& turn, int64_t ticket)
      : turn_(turn), ticket_(ticket) {}
  ~TurnGuard() { Pass(); }
  TurnGuard(const TurnGuard&) = delete;
  TurnGuard& operator=(const TurnGuard&) = delete;
  // Called once the turn came.
  void Hold() { held_ = true; }
  // Lets the next ticket enqueue (at most once).
  void Pass() {
    if (held_) (void)turn_.Signal(static_cast<uint64_t>(ticket_) + 1);
    held_ = false;
  }

 private:
  TimelineSemaphore& turn_;
  const int64_t ticket_;
  bool held_ = false;
};

absl::StatusOr<Event> Scheduler::Submit(const Graph& graph) {
  FERRY_RETURN_IF_ERROR(PrepareSubmit(graph));
  const int64_t ticket = slots_reserved_++;
  TurnGuard turn(slot_turn_, ticket);
  FERRY_RETURN_IF_ERROR(slot_turn_.WaitBlocking(static_cast<uint64_t>(ticket)));
  turn.Hold();
  const int slot = static_cast<int>(ticket % n_copies_);
  // The slot's previous batch must be done before its copies are rewritten.
  for (const Event& event : slot_events_[slot]) {
    FERRY_RETURN_IF_ERROR(event.WaitBlocking());
  }
  return EnqueueBatch(slot);
}

Task<absl::Status> Scheduler::ComputeAsync(const Graph& graph) {
  FERRY_CO_RETURN_IF_ERROR(PrepareSubmit(graph));
  // The ticket is taken before suspending, so callers enqueue in call
  // order, one at a time; by its turn, slot_events_[slot] belong to the
  // last batch that used the slot, however many callers wait.
  const int64_t ticket = slots_reserved_++;
  TurnGuard turn(slot_turn_, ticket);
  FERRY_CO_RETURN_IF_ERROR(
      co_await slot_turn_.Wait(static_cast<uint64_t>(ticket)));
  turn.Hold();
  const int slot = static_cast<int>(ticket % n_copies_);
  const std::vector<Event> busy = slot_events_[slot];
  for (const Event& event : busy) FERRY_CO_RETURN_IF_ERROR(co_await event);
  absl::StatusOr<Event> done = EnqueueBatch(slot);
  turn.Pass();
  FERRY_CO_RETURN_IF_ERROR(done.status());
  co_return co_await *done;
}

absl::Status Scheduler::Compute(const Graph& graph) {
  if (eval_callback_) return ComputeWithCallback(graph);
  FERRY_ASSIGN_OR_RETURN(Event done, Submit(graph));
  return done.WaitBlocking();
}

absl::Status Scheduler::ComputeWithCallback(const Graph& graph) {
  FERRY_RETURN_IF_ERROR(PrepareSubmit(graph));
  const int64_t ticket = slots_reserved_++;
  TurnGuard turn(slot_turn_, ticket);
  FERRY_RETURN_IF_ERROR(slot_turn_.WaitBlocking(static_cast<uint64_t>(ticket)));
  turn.Hold();
  FERRY_RETURN_IF_ERROR(Synchronize());
  const int slot = static_cast<int>(ticket % n_copies_);
  for (const Split& split : splits_) {
    Backend& dst = *backends_[split.backend];
    for (int i = split.inputs_begin; i < split.inputs_end; ++i) {
      const int index = split_inputs_[i];
      const InputCopy& input = input_copies_[index];
      FERRY_RETURN_IF_ERROR(backends_[input.src_backend]->Synchronize());
      FERRY_RETURN_IF_ERROR(CopyTensor(*input.source, *CopySlot(index, slot)));
    }
    // Nodes between observed ones run as one batch.
    const NodeSpan nodes = SplitNodes(split, slot);
    size_t begin = 0;
    for (size_t k = 0; k < nodes.size(); ++k) {
      Tensor& original = *tensors_[nodes[k]->scratch_index];
      if (!eval_callback_(original, /*ask=*/true) && k + 1 != nodes.size()) {
        continue;
      }
      FERRY_RETURN_IF_ERROR(
          dst.EnqueueCompute(NodeSpan(nodes.data() + begin, k + 1 - begin)));
      FERRY_RETURN_IF_ERROR(dst.Synchronize());
      begin = k + 1;
      if (eval_callback_(original, /*ask=*/true) &&
          !eval_callback_(original, /*ask=*/false)) {
        return absl::CancelledError(
            absl::StrCat("evaluation callback stopped the graph after '",
                         original.name, "'"));
      }
    }
  }
  ++stats_.batches;
  return absl::OkStatus();
}

absl::Status Scheduler::Synchronize() {
  absl::Status first;
  for (Backend* backend : backends_) {
    absl::Status status = backend->Synchronize();
    if (first.ok()) first = status;
  }
  if (!batch_timeline_->status().ok()) {
    // Start a fresh batch timeline so the scheduler works again.
    batch_timeline_ =
        std::make_shared<TimelineSemaphore>(static_cast<uint64_t>(next_batch_));
  }
  for (auto& events : slot_events_) events.clear();
  in_flight_ = false;
  return first;
}

void Scheduler::Reset() {
  pins_.clear();
  graph_ = nullptr;
  allocated_ = false;
}

std::string Scheduler::DescribeAssignment() const {
  std::string out;
  if (graph_ == nullptr) return "no graph planned\n";
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor* t = tensors_[i];
    const int b = tensor_backend_[i];
    absl::StrAppendFormat(
        &out, "%s %4d %-10s %-24s -> %-8s (%s)\n",
        i < static_cast<size_t>(graph_->num_nodes()) ? "node" : "leaf",
        static_cast<int>(i < static_cast<size_t>(graph_->num_nodes())
                             ? i
                             : i - graph_->num_nodes()),
        std::string(OpName(t->op)), t->name,
        b >= 0 ? std::string(backends_[b]->name()) : std::string("-"),
        AssignReasonName(reasons_[i]));
  }
  return out;
}

std::string Scheduler::DescribeSplits() const {
  std::string out;
  for (size_t s = 0; s < splits_.size(); ++s) {
    const Split& split = splits_[s];
    absl::StrAppendFormat(&out, "split %zu on %s: nodes [%d, %d)", s,
                          std::string(backends_[split.backend]->name()),
                          split.first_node, split.end_node);
    if (split.inputs_end > split.inputs_begin) out += ", inputs:";
    for (int i = split.inputs_begin; i < split.inputs_end; ++i) {
      const InputCopy& input = input_copies_[split_inputs_[i]];
      absl::StrAppendFormat(&out, " '%s' from %s (%d bytes)%s",
                            input.source->name,
                            std::string(backends_[input.src_backend]->name()),
                            static_cast<int>(input.source->NumBytes()),
                            input.user_input ? " [user input]" : "");
    }
    out += "\n";
  }
  return out;
}

}  // namespace ferry
