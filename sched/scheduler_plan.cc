// The scheduler's planning half: where nodes run (pins, supports, the
// partition), where copies live, the lanes, host registrations, and when a
// plan still holds for a graph. scheduler.cc runs batches on the plan.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/sched/scheduler.h"

namespace ferry {

absl::Status Scheduler::SetTensorBackend(const Tensor& node, Backend& backend) {
  auto it = std::find(backends_.begin(), backends_.end(), &backend);
  if (it == backends_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backend '", backend.name(), "' is not one of the scheduler's"));
  }
  const int index = static_cast<int>(it - backends_.begin());
  if (IsComputeOp(node.op)) {
    if (absl::Status op = backend.CheckOp(node); !op.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot pin '", node.name, "' (", OpName(node.op), ") to '",
          backend.name(), "', which does not support it: ", op.message()));
    }
  }
  if (HasPresetMemory(node) && node.buffer != nullptr &&
      !backend.device().SupportsBufferType(node.buffer->type())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot pin '", node.name, "' to '", backend.name(),
        "', which cannot use its memory (", node.buffer->type()->name(), ")"));
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
  const int32_t i = signature_.IndexOf(&tensor);
  if (i < 0 || static_cast<size_t>(i) >= partition_.backend.size()) {
    return nullptr;
  }
  const int b = partition_.backend[static_cast<size_t>(i)];
  return b < 0 ? nullptr : backends_[b];
}

// --- Planning ---

bool Scheduler::Supports(int backend, int i) {
  int8_t& cached =
      supports_[static_cast<size_t>(i) * backends_.size() + backend];
  if (cached < 0) {
    cached = backends_[backend]->SupportsOp(*signature_.tensor(i)) ? 1 : 0;
  }
  return cached == 1;
}

void Scheduler::ForgetChangedSupports() {
  const size_t nb = backends_.size();
  const size_t n = signature_.size();
  if (supports_.size() != n * nb) {
    supports_.assign(n * nb, -1);
    return;
  }
  // SupportsOp reads a node and its sources: an answer holds while neither
  // changed (a graph whose KV length grows keeps most of them).
  for (size_t i = 0; i < n; ++i) {
    const GraphSignature::Wiring& w = signature_.wiring(i);
    bool changed = signature_.changed(i) ||
                   (w.view_src >= 0 && signature_.changed(w.view_src));
    for (const int32_t src : w.src) {
      changed = changed || (src >= 0 && signature_.changed(src));
    }
    if (changed) std::fill_n(supports_.begin() + i * nb, nb, int8_t{-1});
  }
}

absl::Status Scheduler::PlanPartition() {
  // Named: PartitionFacts holds references to them.
  auto supports = [this](int b, int i) { return Supports(b, i); };
  auto offload = [this](int b, int i) {
    return backends_[b]->device().OffloadOp(*signature_.tensor(i));
  };
  auto uses_buffer_type = [this](int b, const BufferType* type) {
    return backends_[b]->device().SupportsBufferType(type);
  };
  auto name = [this](int b) { return std::string(backends_[b]->name()); };
  const PartitionFacts facts{.num_backends = num_backends(),
                             .supports = supports,
                             .offload = offload,
                             .uses_buffer_type = uses_buffer_type,
                             .name = name};
  const PartitionOptions options{.op_offload = options_.op_offload,
                                 .max_split_inputs = options_.max_split_inputs};
  FERRY_RETURN_IF_ERROR(
      AssignBackends(signature_, facts, options, pin_numbers_, partition_));
  FERRY_RETURN_IF_ERROR(CutSplits(signature_, options, partition_));

  FERRY_RETURN_IF_ERROR(MakeLanes());
  // Each lane's activations in buffers of its own (a backend's first lane
  // shares them with backends of the same type, as in ggml); tensors that
  // no lane computes live with their backend's first lane.
  const size_t n_nodes = signature_.num_nodes();
  node_types_.resize(n_nodes);
  leaf_types_.resize(signature_.num_leafs());
  for (size_t i = 0; i < signature_.size(); ++i) {
    const int lane = i < n_nodes ? partition_.node_lane[i] : -1;
    const int type = lane >= 0 ? lanes_.type(lane)
                               : lanes_.backend_type(partition_.backend[i]);
    if (i < n_nodes) {
      node_types_[i] = type;
    } else {
      leaf_types_[i - n_nodes] = type;
    }
  }
  for (auto& row : stats_.copies) std::fill(row.begin(), row.end(), 0);
  for (auto& row : stats_.copy_bytes) std::fill(row.begin(), row.end(), 0);
  for (const InputCopy& copy : partition_.copies) {
    stats_.copies[copy.src_backend][copy.dst_backend] += 1;
    stats_.copy_bytes[copy.src_backend][copy.dst_backend] +=
        signature_.tensor(copy.source)->NumBytes();
  }
  stats_.num_splits = static_cast<int>(partition_.splits.size());
  stats_.num_split_inputs = static_cast<int>(partition_.copies.size());
  return absl::OkStatus();
}

absl::Status Scheduler::PlaceCopies() {
  std::vector<CopySlots::Spec> specs;
  specs.reserve(partition_.copies.size());
  for (const InputCopy& copy : partition_.copies) {
    CopySlots::Spec spec;
    spec.source = signature_.tensor(copy.source);
    spec.type = buffer_types_[copy.dst_backend];
    if (copy.user_input && !spec.type->is_host()) {
      // Staged in pinned memory so the upload is asynchronous.
      BufferType* staging =
          backends_[copy.dst_backend]->device().host_buffer_type();
      spec.staging_type = staging != nullptr ? staging
                          : pinned_type_ != nullptr
                              ? pinned_type_
                              : backends_[cpu_]->default_buffer_type();
    }
    spec.backend = std::string(backends_[copy.dst_backend]->name());
    specs.push_back(std::move(spec));
  }
  FERRY_RETURN_IF_ERROR(slots_.Place(specs, [this] { return Synchronize(); }));
  for (int b = 0; b < num_backends(); ++b) {
    stats_.copy_buffer_bytes[b] = slots_.copy_bytes(buffer_types_[b]);
  }
  return absl::OkStatus();
}

absl::Status Scheduler::MakeLanes() {
  FERRY_RETURN_IF_ERROR(
      lanes_.Make(partition_, backends_, buffer_types_, cpu_));
  if (allocator_ == nullptr || allocator_types_ != lanes_.types()) {
    // Batches in flight use the old buffers (Replan synchronized).
    allocator_ = std::make_unique<GraphAllocator>(lanes_.types());
    allocator_types_ = lanes_.types();
  }
  return absl::OkStatus();
}

absl::Status Scheduler::RegisterHostMemory() {
  registrations_.Update(signature_, partition_, backends_, pinned_type_);
  stats_.registered_host_buffers = registrations_.size();
  reregister_ = false;
  return absl::OkStatus();
}

absl::StatusOr<bool> Scheduler::Describe(const Graph& graph) {
  graph_ = nullptr;
  allocated_ = false;
  FERRY_RETURN_IF_ERROR(signature_.Update(graph));
  pin_scratch_.clear();
  for (const auto& [tensor, b] : pins_) {
    const int32_t i = signature_.IndexOf(tensor);
    if (i >= 0) pin_scratch_.emplace_back(i, b);
  }
  ++stats_.graphs_planned;
  const bool holds =
      plan_valid_ && signature_.unchanged() && pin_scratch_ == pin_numbers_;
  // The signature now describes `graph`: until a new plan is made, nothing
  // may match it.
  if (!holds) plan_valid_ = false;
  return holds;
}

absl::Status Scheduler::Replan(const Graph& graph) {
  // A new plan rewrites the copies batches in flight use.
  if (in_flight_) FERRY_RETURN_IF_ERROR(Synchronize());
  pin_numbers_ = pin_scratch_;
  ForgetChangedSupports();
  FERRY_RETURN_IF_ERROR(PlanPartition());
  FERRY_RETURN_IF_ERROR(PlaceCopies());
  FERRY_RETURN_IF_ERROR(RegisterHostMemory());
  slot_nodes_.Build(signature_, partition_, slots_);
  graph_ = &graph;
  graph_id_ = graph.id();
  plan_valid_ = true;
  return absl::OkStatus();
}

absl::Status Scheduler::Adopt(const Graph& graph, bool holds) {
  if (!holds) return Replan(graph);
  // Same plan; only pointers to the graph's tensors may need updating.
  // Batches in flight read none of them (backends snapshot their nodes).
  if (!signature_.same_tensors())
    slot_nodes_.Build(signature_, partition_, slots_);
  if (reregister_) FERRY_RETURN_IF_ERROR(RegisterHostMemory());
  graph_ = &graph;
  graph_id_ = graph.id();
  ++stats_.plans_reused;
  return absl::OkStatus();
}

absl::Status Scheduler::Plan(const Graph& graph) {
  FERRY_ASSIGN_OR_RETURN(const bool holds, Describe(graph));
  return Adopt(graph, holds);
}

absl::Status Scheduler::Allocate(const Graph& graph) {
  BufferAssignment assignment{leaf_types_, node_types_};
  absl::Status status = allocator_->Allocate(graph, assignment, signature_);
  if (absl::IsResourceExhausted(status)) {
    // Does not fit: wait for batches in flight (they use the buffers), grow
    // the buffers and place again. Counted, never silent.
    FERRY_RETURN_IF_ERROR(Synchronize());
    if (reserved_) ++stats_.re_reserves;
    FERRY_RETURN_IF_ERROR(allocator_->Reserve(graph, assignment, signature_),
                          "scheduler: compute buffers");
    reserved_ = true;
    status = allocator_->Allocate(graph, assignment, signature_);
  }
  FERRY_RETURN_IF_ERROR(status, "scheduler: compute buffers");
  slot_nodes_.RefreshMemory(signature_);
  NoteComputeBytes();
  allocated_ = true;
  return absl::OkStatus();
}

void Scheduler::NoteComputeBytes() {
  for (int b = 0; b < num_backends(); ++b) {
    size_t bytes = allocator_->buffer_size(lanes_.backend_type(b));
    for (int l = 0; l < lanes_.size(); ++l) {
      if (lanes_.backend(l) == b && lanes_.type(l) != lanes_.backend_type(b)) {
        bytes += allocator_->buffer_size(lanes_.type(l));
      }
    }
    stats_.compute_bytes[b] = bytes;
  }
}

absl::Status Scheduler::Reserve(const Graph& graph) {
  FERRY_RETURN_IF_ERROR(Synchronize());
  FERRY_RETURN_IF_ERROR(Plan(graph));
  BufferAssignment assignment{leaf_types_, node_types_};
  FERRY_RETURN_IF_ERROR(allocator_->Reserve(graph, assignment, signature_),
                        "scheduler: compute buffers");
  reserved_ = true;
  NoteComputeBytes();
  graph_ = nullptr;  // Reserve plans only; AllocGraph places.
  return absl::OkStatus();
}

absl::Status Scheduler::AllocGraph(const Graph& graph) {
  FERRY_RETURN_IF_ERROR(Plan(graph));
  return Allocate(graph);
}

// --- Batches ---

std::string Scheduler::DescribeAssignment() const {
  if (graph_ == nullptr) return "no graph planned\n";
  return ferry::DescribeAssignment(signature_, partition_, BackendNames());
}

std::string Scheduler::DescribeSplits() const {
  return ferry::DescribeSplits(signature_, partition_, BackendNames());
}

std::vector<std::string> Scheduler::BackendNames() const {
  std::vector<std::string> names;
  for (Backend* backend : backends_) names.emplace_back(backend->name());
  // Backends of one device share its name: tell them apart by index.
  std::vector<std::string> out = names;
  for (size_t b = 0; b < names.size(); ++b) {
    if (std::count(names.begin(), names.end(), names[b]) > 1) {
      out[b] = absl::StrCat(names[b], "#", b);
    }
  }
  return out;
}

}  // namespace ferry
