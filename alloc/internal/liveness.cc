#include "ferry/alloc/internal/liveness.h"

#include <algorithm>
#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/graph/op.h"

namespace ferry::alloc_internal {
namespace {

constexpr uint32_t kPinnedFlags =
    kTensorFlagInput | kTensorFlagOutput | kTensorFlagWeight;

bool SameLayout(const Tensor& a, const Tensor& b) {
  return a.dtype == b.dtype && a.ne == b.ne && a.nb == b.nb;
}

}  // namespace

absl::StatusOr<Liveness> AnalyzeLiveness(
    const Graph& graph, absl::Span<BufferType* const> types,
    absl::Span<const int> leaf_types, absl::Span<const int> node_types,
    absl::FunctionRef<bool(const Tensor&)> is_preset, bool in_place) {
  const int32_t num_leafs = static_cast<int32_t>(graph.num_leafs());
  const int32_t num_nodes = static_cast<int32_t>(graph.num_nodes());
  if (types.empty()) {
    return absl::InvalidArgumentError("graph allocator: no buffer types");
  }
  if (!leaf_types.empty() && leaf_types.size() != graph.leafs().size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph allocator: ", leaf_types.size(),
                     " leaf buffer types for ", num_leafs, " leafs"));
  }
  if (!node_types.empty() && node_types.size() != graph.nodes().size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph allocator: ", node_types.size(),
                     " node buffer types for ", num_nodes, " nodes"));
  }

  Liveness live;
  live.num_steps = num_nodes;
  live.num_leafs = num_leafs;
  const int32_t num_records = num_leafs + num_nodes;
  live.records.resize(static_cast<size_t>(num_records));
  live.src_refs.assign(static_cast<size_t>(num_records) * kMaxSrc, kNoRef);
  absl::flat_hash_map<const Tensor*, int32_t> index;
  index.reserve(static_cast<size_t>(num_records));
  for (int32_t r = 0; r < num_records; ++r) {
    Tensor* t = r < num_leafs
                    ? graph.leafs()[static_cast<size_t>(r)]
                    : graph.nodes()[static_cast<size_t>(r - num_leafs)];
    TensorRecord& rec = live.records[static_cast<size_t>(r)];
    rec.tensor = t;
    const absl::Span<const int> type_list =
        r < num_leafs ? leaf_types : node_types;
    const int32_t pos = r < num_leafs ? r : r - num_leafs;
    rec.type = type_list.empty() ? 0 : type_list[static_cast<size_t>(pos)];
    if (rec.type < 0 || rec.type >= static_cast<int>(types.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "graph allocator: tensor '", t->name, "' has buffer type index ",
          rec.type, " of ", types.size()));
    }
    if (!index.emplace(t, r).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph allocator: tensor '", t->name,
                       "' appears twice in the graph"));
    }
  }

  auto find = [&](const Tensor* t) -> int32_t {
    auto it = index.find(t);
    return it == index.end() ? kExternalRef : it->second;
  };

  // Classify and wire.
  for (int32_t r = 0; r < num_records; ++r) {
    TensorRecord& rec = live.records[static_cast<size_t>(r)];
    Tensor& t = *rec.tensor;
    const int32_t step = r < num_leafs ? kBeforeGraph : r - num_leafs;
    for (int j = 0; j < kMaxSrc; ++j) {
      const Tensor* s = t.src[static_cast<size_t>(j)];
      if (s == nullptr) continue;
      const int32_t ref = find(s);
      if (ref == kExternalRef && s->data == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("graph allocator: source '", s->name, "' of '", t.name,
                         "' is not in the graph and has no data"));
      }
      if (ref >= num_leafs && ref - num_leafs >= step && step >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("graph allocator: node '", t.name, "' reads node '",
                         s->name, "' that does not come before it (a cycle?)"));
      }
      live.src_refs[static_cast<size_t>(r) * kMaxSrc + j] = ref;
    }
    if (t.view_src != nullptr) {
      rec.kind = RecordKind::kView;
      const int32_t ref = find(t.view_src);
      if (ref == kExternalRef && t.view_src->data == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "graph allocator: view source '", t.view_src->name, "' of '",
            t.name, "' is not in the graph and has no data"));
      }
      if (ref >= num_leafs && (step < 0 || ref - num_leafs >= step)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "graph allocator: view '", t.name, "' of '", t.view_src->name,
            "' does not come after its source (a cycle?)"));
      }
      if (ref >= 0 &&
          live.records[static_cast<size_t>(ref)].tensor->view_src != nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("graph allocator: view source '", t.view_src->name,
                         "' is itself a view"));
      }
      rec.root = ref;
      continue;
    }
    if (is_preset(t)) {
      rec.kind = RecordKind::kPreset;
      continue;
    }
    if (t.HasFlag(kTensorFlagWeight)) {
      return absl::FailedPreconditionError(
          absl::StrCat("graph allocator: weight '", t.name,
                       "' has no memory; allocate weights before the graph"));
    }
    rec.kind = RecordKind::kPlanned;
    BufferType& type = *types[static_cast<size_t>(rec.type)];
    const int64_t alignment = static_cast<int64_t>(type.alignment());
    rec.size = std::max<int64_t>(
        alignment, AlignUp(static_cast<int64_t>(type.AllocSize(t)), alignment));
    if (static_cast<uint64_t>(rec.size) > type.max_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "graph allocator: tensor '", t.name, "' ", t.ShapeString(), " needs ",
          rec.size, " bytes, more than the maximum buffer size ",
          type.max_size(), " of ", type.name()));
    }
    rec.start = step;
    rec.end = step;
  }

  // Root of a record's memory (itself when planned), or kNoRef.
  auto planned_root = [&](int32_t ref) -> int32_t {
    if (ref < 0) return kNoRef;
    const TensorRecord& rec = live.records[static_cast<size_t>(ref)];
    if (rec.kind == RecordKind::kView) ref = rec.root;
    if (ref < 0) return kNoRef;
    return live.records[static_cast<size_t>(ref)].kind == RecordKind::kPlanned
               ? ref
               : kNoRef;
  };

  // Uses, consumers, flags.
  std::vector<int32_t> consumers(static_cast<size_t>(num_records), 0);
  for (int32_t r = num_leafs; r < num_records; ++r) {
    const int32_t step = r - num_leafs;
    for (int j = 0; j < kMaxSrc; ++j) {
      const int32_t ref = live.src_refs[static_cast<size_t>(r) * kMaxSrc + j];
      if (ref < 0) continue;
      ++consumers[static_cast<size_t>(ref)];
      const int32_t root = planned_root(ref);
      if (root >= 0) {
        TensorRecord& rr = live.records[static_cast<size_t>(root)];
        rr.end = std::max(rr.end, step);
      }
    }
    // A view node keeps its source alive at least until it is computed.
    const TensorRecord& rec = live.records[static_cast<size_t>(r)];
    if (rec.kind == RecordKind::kView) {
      const int32_t root = planned_root(rec.root);
      if (root >= 0) {
        TensorRecord& rr = live.records[static_cast<size_t>(root)];
        rr.end = std::max(rr.end, step);
      }
    }
  }
  for (int32_t r = 0; r < num_records; ++r) {
    const TensorRecord& rec = live.records[static_cast<size_t>(r)];
    const int32_t root = planned_root(r);
    if (root < 0) continue;
    TensorRecord& rr = live.records[static_cast<size_t>(root)];
    const bool unread = consumers[static_cast<size_t>(r)] == 0;
    if (rec.tensor->HasFlag(kTensorFlagOutput) || unread) {
      rr.end = num_nodes;
    }
    if (rec.tensor->HasFlag(kTensorFlagInput)) {
      rr.start = kBeforeGraph;
      rr.end = num_nodes;
    }
  }

  // Blocks, with in-place chaining in execution order.
  for (int32_t r = 0; r < num_records; ++r) {
    TensorRecord& rec = live.records[static_cast<size_t>(r)];
    if (rec.kind != RecordKind::kPlanned) continue;
    const Tensor& t = *rec.tensor;
    if (in_place && r >= num_leafs && OpCanRunInPlace(t.op) &&
        rec.start == r - num_leafs) {
      const int32_t step = r - num_leafs;
      const int32_t p = live.src_refs[static_cast<size_t>(r) * kMaxSrc];
      const int32_t root = planned_root(p);
      bool ok = root >= num_leafs;
      if (ok) {
        const TensorRecord& pr = live.records[static_cast<size_t>(p)];
        const TensorRecord& rr = live.records[static_cast<size_t>(root)];
        const Block& block = live.blocks[static_cast<size_t>(rr.block)];
        ok = rr.end == step && block.end == step && rr.type == rec.type &&
             (rr.tensor->flags & kPinnedFlags) == 0 &&
             (pr.tensor->flags & kPinnedFlags) == 0 &&
             SameLayout(*pr.tensor, t) &&
             (pr.kind != RecordKind::kView || pr.tensor->view_offset == 0) &&
             rec.size == block.size;
        for (int j = 1; ok && j < kMaxSrc; ++j) {
          ok = planned_root(
                   live.src_refs[static_cast<size_t>(r) * kMaxSrc + j]) != root;
        }
      }
      if (ok) {
        const int32_t b = live.records[static_cast<size_t>(root)].block;
        rec.block = b;
        rec.in_place = true;
        Block& block = live.blocks[static_cast<size_t>(b)];
        block.end = std::max(block.end, rec.end);
        continue;
      }
    }
    rec.block = static_cast<int32_t>(live.blocks.size());
    live.blocks.push_back(Block{.type = rec.type,
                                .size = rec.size,
                                .start = rec.start,
                                .end = rec.end,
                                .first_record = r});
  }
  return live;
}

int64_t PeakLiveBytes(const Liveness& liveness, int type, bool in_place) {
  // delta[s + 1] for s in [-1, N + 1].
  std::vector<int64_t> delta(static_cast<size_t>(liveness.num_steps) + 3, 0);
  auto add = [&](int32_t start, int32_t end, int64_t size) {
    delta[static_cast<size_t>(start + 1)] += size;
    delta[static_cast<size_t>(end + 2)] -= size;
  };
  if (in_place) {
    for (const Block& b : liveness.blocks) {
      if (b.type == type) add(b.start, b.end, b.size);
    }
  } else {
    for (const TensorRecord& r : liveness.records) {
      if (r.kind == RecordKind::kPlanned && r.type == type) {
        add(r.start, r.end, r.size);
      }
    }
  }
  int64_t live = 0;
  int64_t peak = 0;
  for (int64_t d : delta) {
    live += d;
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace ferry::alloc_internal
