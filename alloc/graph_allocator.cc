#include "ferry/alloc/graph_allocator.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/alloc/internal/planner.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {

using alloc_internal::kExternalRef;
using alloc_internal::Liveness;
using alloc_internal::RecordKind;

// A plan with the signature and buffer types of the graph it was made for.
struct GraphAllocator::CachedPlan {
  struct Entry {
    RecordKind kind;
    int type;
    // Placement (kPlanned).
    int32_t chunk;
    int64_t offset;
  };
  GraphSignature signature;
  uint64_t generation = 0;  // signature's content at planning.
  std::vector<int> leaf_types;
  std::vector<int> node_types;
  int32_t num_leafs = 0;
  std::vector<Entry> entries;  // Per record (leafs, then nodes).
  std::vector<int32_t> views;  // View records, in order.
  PlanSummary summary;
};

namespace {

Tensor* RecordTensor(const Graph& graph, int32_t num_leafs, int32_t r) {
  return r < num_leafs ? graph.leafs()[static_cast<size_t>(r)]
                       : graph.nodes()[static_cast<size_t>(r - num_leafs)];
}

}  // namespace

GraphAllocator::GraphAllocator(std::vector<BufferType*> types,
                               GraphAllocatorOptions options)
    : types_(std::move(types)), options_(options), buffers_(types_.size()) {
  last_plan_.chunk_sizes.resize(types_.size());
  last_plan_.bytes.resize(types_.size());
}

GraphAllocator::~GraphAllocator() = default;

bool GraphAllocator::IsOwnBuffer(const Buffer* buffer) const {
  if (buffer == nullptr) return false;
  for (const Buffer* own : own_buffers_) {
    if (own == buffer) return true;
  }
  return false;
}

size_t GraphAllocator::buffer_size(int type) const {
  size_t total = 0;
  for (const auto& b : buffers_[static_cast<size_t>(type)]) {
    if (b != nullptr) total += b->size();
  }
  return total;
}

int GraphAllocator::num_buffers(int type) const {
  return static_cast<int>(buffers_[static_cast<size_t>(type)].size());
}

Buffer* GraphAllocator::buffer(int type, int chunk) const {
  return buffers_[static_cast<size_t>(type)][static_cast<size_t>(chunk)].get();
}

absl::StatusOr<Liveness> GraphAllocator::Analyze(
    const Graph& graph, BufferAssignment assignment) const {
  return alloc_internal::AnalyzeLiveness(
      graph, types_, assignment.leaf_types, assignment.node_types,
      [this](const Tensor& t) { return HasPresetMemory(t); },
      options_.in_place);
}

absl::StatusOr<std::unique_ptr<GraphAllocator::CachedPlan>>
GraphAllocator::MakePlan(const Graph& graph, BufferAssignment assignment,
                         bool use_reserved, PlanSummary* summary) const {
  FERRY_ASSIGN_OR_RETURN(Liveness live, Analyze(graph, assignment));
  std::vector<alloc_internal::ChunkLimits> limits(types_.size());
  std::vector<int64_t> alignments(types_.size());
  for (size_t t = 0; t < types_.size(); ++t) {
    const int64_t alignment = static_cast<int64_t>(types_[t]->alignment());
    alignments[t] = alignment;
    if (use_reserved) {
      for (const auto& b : buffers_[t]) {
        limits[t].caps.push_back(
            b == nullptr ? 0 : static_cast<int64_t>(b->size()));
      }
      limits[t].allow_new_chunks = false;
    } else {
      const uint64_t max = std::min<uint64_t>(types_[t]->max_size(), INT64_MAX);
      limits[t].new_chunk_cap = std::max<int64_t>(
          alignment, static_cast<int64_t>(max) / alignment * alignment);
    }
  }
  alloc_internal::PlanStrategy strategy = alloc_internal::PlanStrategy::kBest;
  if (options_.strategy == PlanningStrategy::kOffline) {
    strategy = alloc_internal::PlanStrategy::kOffline;
  } else if (options_.strategy == PlanningStrategy::kOnline) {
    strategy = alloc_internal::PlanStrategy::kOnline;
  }
  absl::StatusOr<alloc_internal::MemoryPlan> memory =
      alloc_internal::PlanMemory(live, limits, alignments, strategy);
  if (!memory.ok()) {
    if (absl::IsResourceExhausted(memory.status()) && !use_reserved) {
      return absl::InternalError(
          absl::StrCat("graph allocator: planning without limits failed: ",
                       memory.status().message()));
    }
    return memory.status();
  }

  auto plan = std::make_unique<CachedPlan>();
  plan->num_leafs = live.num_leafs;
  plan->entries.resize(live.records.size());
  PlanSummary& s = plan->summary;
  s.chunk_sizes = memory->chunk_sizes;
  s.bytes.resize(types_.size());
  for (size_t t = 0; t < types_.size(); ++t) {
    s.bytes[t] = memory->TotalBytes(static_cast<int>(t));
  }
  for (size_t r = 0; r < live.records.size(); ++r) {
    const alloc_internal::TensorRecord& rec = live.records[r];
    CachedPlan::Entry& e = plan->entries[r];
    e.kind = rec.kind;
    e.type = rec.type;
    e.chunk = 0;
    e.offset = 0;
    if (rec.kind == RecordKind::kView) {
      plan->views.push_back(static_cast<int32_t>(r));
    }
    if (rec.kind == RecordKind::kPlanned) {
      const DynamicAddress& a =
          memory->block_address[static_cast<size_t>(rec.block)];
      e.chunk = a.chunk;
      e.offset = a.offset;
      ++s.num_planned;
      if (rec.in_place) ++s.num_in_place;
    }
  }
  if (summary != nullptr) *summary = s;
  return plan;
}

GraphAllocator::CachedPlan* GraphAllocator::FindCached(
    const GraphSignature& signature, BufferAssignment assignment) {
  auto same_types = [](absl::Span<const int> types,
                       const std::vector<int>& cached, size_t n) {
    if (types.empty()) {
      return std::all_of(cached.begin(), cached.end(),
                         [](int t) { return t == 0; });
    }
    return types.size() == n &&
           std::equal(types.begin(), types.end(), cached.begin(), cached.end());
  };
  for (const auto& cached : cache_) {
    CachedPlan& plan = *cached;
    if (!same_types(assignment.leaf_types, plan.leaf_types,
                    signature.num_leafs()) ||
        !same_types(assignment.node_types, plan.node_types,
                    signature.num_nodes())) {
      continue;
    }
    // The same generation is the same content; otherwise compare.
    if (plan.generation != signature.generation()) {
      if (!plan.signature.SameContent(signature)) continue;
      plan.generation = signature.generation();
    }
    return &plan;
  }
  return nullptr;
}

absl::Status GraphAllocator::Apply(const CachedPlan& plan, const Graph& graph) {
  const int32_t num_leafs = plan.num_leafs;
  const size_t n = plan.entries.size();
  absl::Status status;
  for (size_t r = 0; r < n && status.ok(); ++r) {
    const CachedPlan::Entry& e = plan.entries[r];
    if (e.kind != RecordKind::kPlanned) continue;
    Tensor& t = *RecordTensor(graph, num_leafs, static_cast<int32_t>(r));
    Buffer* b =
        buffers_[static_cast<size_t>(e.type)][static_cast<size_t>(e.chunk)]
            .get();
    t.buffer = b;
    t.data = static_cast<char*>(b->base()) + e.offset;
    t.flags |= kTensorFlagAllocated;
    status = b->InitTensor(t);
  }
  for (size_t i = 0; i < plan.views.size() && status.ok(); ++i) {
    Tensor& t = *RecordTensor(graph, num_leafs, plan.views[i]);
    if (HasPresetMemory(t)) continue;
    const Tensor& root = *t.view_src;
    if (root.data == nullptr) {
      status = absl::FailedPreconditionError(
          absl::StrCat("graph allocator: view '", t.name, "' of '", root.name,
                       "': the source has no memory"));
      break;
    }
    t.buffer = root.buffer;
    t.data = static_cast<char*>(root.data) + t.view_offset;
    t.flags |= kTensorFlagAllocated;
    if (t.buffer != nullptr) status = t.buffer->InitTensor(t);
  }
  if (!status.ok()) {
    for (size_t r = 0; r < n; ++r) {
      const CachedPlan::Entry& e = plan.entries[r];
      if (e.kind == RecordKind::kPreset) continue;
      Tensor& t = *RecordTensor(graph, num_leafs, static_cast<int32_t>(r));
      if (e.kind == RecordKind::kPlanned ||
          (t.flags & kTensorFlagAllocated) != 0) {
        t.buffer = nullptr;
        t.data = nullptr;
        t.flags &= ~static_cast<uint32_t>(kTensorFlagAllocated);
      }
    }
  }
  return status;
}

void GraphAllocator::Remember(std::unique_ptr<CachedPlan> plan,
                              const GraphSignature& signature,
                              BufferAssignment assignment) {
  plan->signature = signature;
  plan->generation = signature.generation();
  auto types = [](absl::Span<const int> given, size_t n) {
    return given.empty() ? std::vector<int>(n, 0)
                         : std::vector<int>(given.begin(), given.end());
  };
  plan->leaf_types = types(assignment.leaf_types, signature.num_leafs());
  plan->node_types = types(assignment.node_types, signature.num_nodes());
  cache_.insert(cache_.begin(), std::move(plan));
  const size_t max =
      static_cast<size_t>(std::max(1, options_.max_cached_plans));
  if (cache_.size() > max) cache_.resize(max);
}

namespace {

// Unplaces the graph's tensors whose memory is in `is_own` buffers.
template <typename IsOwn>
void UnplaceOwn(const Graph& graph, IsOwn is_own) {
  for (absl::Span<Tensor* const> list : {graph.leafs(), graph.nodes()}) {
    for (Tensor* t : list) {
      if (is_own(t->buffer)) {
        t->buffer = nullptr;
        t->data = nullptr;
        t->flags &= ~static_cast<uint32_t>(kTensorFlagAllocated);
      }
    }
  }
}

}  // namespace

absl::Status GraphAllocator::Reserve(const Graph& graph,
                                     BufferAssignment assignment) {
  FERRY_RETURN_IF_ERROR(signature_.Update(graph));
  return Reserve(graph, assignment, signature_);
}

absl::Status GraphAllocator::Reserve(const Graph& graph,
                                     BufferAssignment assignment,
                                     const GraphSignature& signature) {
  PlanSummary summary;
  FERRY_ASSIGN_OR_RETURN(
      std::unique_ptr<CachedPlan> plan,
      MakePlan(graph, assignment, /*use_reserved=*/false, &summary));
  // Which chunks must grow.
  bool grows = false;
  for (size_t t = 0; t < types_.size(); ++t) {
    const std::vector<int64_t>& need = summary.chunk_sizes[t];
    for (size_t c = 0; c < need.size(); ++c) {
      if (c >= buffers_[t].size() || buffers_[t][c] == nullptr ||
          static_cast<int64_t>(buffers_[t][c]->size()) < need[c]) {
        grows = true;
      }
    }
  }
  if (grows) {
    // The graph's tensors placed in buffers about to go would dangle.
    UnplaceOwn(graph, [this](const Buffer* b) { return IsOwnBuffer(b); });
    for (size_t t = 0; t < types_.size(); ++t) {
      const std::vector<int64_t>& need = summary.chunk_sizes[t];
      if (buffers_[t].size() < need.size()) buffers_[t].resize(need.size());
      for (size_t c = 0; c < need.size(); ++c) {
        std::unique_ptr<Buffer>& b = buffers_[t][c];
        if (b != nullptr && static_cast<int64_t>(b->size()) < need[c]) {
          b.reset();
        }
      }
    }
    absl::Status status;
    for (size_t t = 0; t < types_.size() && status.ok(); ++t) {
      const std::vector<int64_t>& need = summary.chunk_sizes[t];
      for (size_t c = 0; c < need.size() && status.ok(); ++c) {
        std::unique_ptr<Buffer>& b = buffers_[t][c];
        if (b != nullptr || need[c] == 0) continue;
        absl::StatusOr<std::unique_ptr<Buffer>> made =
            types_[t]->Allocate(static_cast<size_t>(need[c]));
        if (!made.ok()) {
          status = absl::Status(
              made.status().code(),
              absl::StrCat("graph allocator: cannot allocate compute buffer ",
                           c, " of ", need[c], " bytes of ", types_[t]->name(),
                           ": ", made.status().message()));
          break;
        }
        b = *std::move(made);
        b->set_usage(BufferUsage::kCompute);
      }
    }
    if (!status.ok()) {
      for (auto& list : buffers_) list.clear();
      own_buffers_.clear();
      cache_.clear();
      return status;
    }
    own_buffers_.clear();
    for (const auto& list : buffers_) {
      for (const auto& b : list) {
        if (b != nullptr) own_buffers_.push_back(b.get());
      }
    }
    ++reserve_count_;
  }
  last_plan_ = summary;
  // The plan's tensors were classified with the old own-buffer set; a graph
  // placed in replaced buffers was unplaced above, so it still matches.
  Remember(std::move(plan), signature, assignment);
  return absl::OkStatus();
}

absl::Status GraphAllocator::Allocate(const Graph& graph,
                                      BufferAssignment assignment) {
  FERRY_RETURN_IF_ERROR(signature_.Update(graph));
  return Allocate(graph, assignment, signature_);
}

absl::Status GraphAllocator::Allocate(const Graph& graph,
                                      BufferAssignment assignment,
                                      const GraphSignature& signature) {
  if (const CachedPlan* plan = FindCached(signature, assignment);
      plan != nullptr) {
    FERRY_RETURN_IF_ERROR(Apply(*plan, graph));
    ++fast_allocations_;
    last_plan_ = plan->summary;
    last_plan_.fast_path = true;
    return absl::OkStatus();
  }
  PlanSummary summary;
  absl::StatusOr<std::unique_ptr<CachedPlan>> plan =
      MakePlan(graph, assignment, /*use_reserved=*/true, &summary);
  if (!plan.ok()) {
    UnplaceOwn(graph, [this](const Buffer* b) { return IsOwnBuffer(b); });
    if (absl::IsResourceExhausted(plan.status())) {
      ++failed_allocations_;
      return absl::ResourceExhaustedError(absl::StrCat(
          "graph allocator: the graph does not fit the reserved buffers "
          "(Reserve it first): ",
          plan.status().message()));
    }
    return plan.status();
  }
  FERRY_RETURN_IF_ERROR(Apply(**plan, graph));
  ++planned_allocations_;
  last_plan_ = summary;
  Remember(*std::move(plan), signature, assignment);
  return absl::OkStatus();
}

absl::StatusOr<PlanSummary> GraphAllocator::Measure(
    const Graph& graph, BufferAssignment assignment) const {
  PlanSummary summary;
  FERRY_RETURN_IF_ERROR(
      MakePlan(graph, assignment, /*use_reserved=*/false, &summary).status());
  return summary;
}

}  // namespace ferry
