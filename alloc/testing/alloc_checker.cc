#include "ferry/alloc/testing/alloc_checker.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/op.h"

namespace ferry::testing {
namespace {

constexpr int32_t kForever = 1 << 30;

struct Life {
  int32_t def = 0;
  int32_t last = 0;
};

const Tensor* Root(const Tensor* t) {
  return t->view_src != nullptr ? t->view_src : t;
}

uintptr_t Addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace

absl::Status CheckGraphAllocation(const Graph& graph, int* num_in_place) {
  const int32_t n = static_cast<int32_t>(graph.num_nodes());
  std::vector<const Tensor*> all(graph.leafs().begin(), graph.leafs().end());
  all.insert(all.end(), graph.nodes().begin(), graph.nodes().end());
  absl::flat_hash_map<const Tensor*, int32_t> node_index;
  for (int32_t i = 0; i < n; ++i) node_index[graph.nodes()[i]] = i;

  // (a) Placement.
  for (const Tensor* t : all) {
    if (t->data == nullptr) {
      return absl::InternalError(absl::StrCat("'", t->name, "' has no memory"));
    }
    if (t->view_src != nullptr) {
      if (t->data != static_cast<char*>(t->view_src->data) + t->view_offset ||
          t->buffer != t->view_src->buffer) {
        return absl::InternalError(
            absl::StrCat("view '", t->name, "' is not at its source '",
                         t->view_src->name, "' + ", t->view_offset));
      }
    }
    if (t->buffer == nullptr) continue;
    const Buffer& b = *t->buffer;
    const uintptr_t base = Addr(b.base());
    const uintptr_t at = Addr(t->data);
    const uintptr_t bytes = t->view_src != nullptr
                                ? static_cast<uintptr_t>(t->NumBytes())
                                : b.type()->AllocSize(*t);
    if (at < base || at + bytes > base + b.size()) {
      return absl::InternalError(
          absl::StrCat("'", t->name, "' [", at - base, ", +", bytes,
                       ") is outside its buffer of ", b.size(), " bytes"));
    }
    if (t->view_src == nullptr && (at - base) % b.type()->alignment() != 0) {
      return absl::InternalError(absl::StrCat("'", t->name, "' at offset ",
                                              at - base, " breaks alignment ",
                                              b.type()->alignment()));
    }
    if (t->view_src != nullptr && t->view_src->buffer != nullptr) {
      const uintptr_t root_at = Addr(t->view_src->data);
      if (at + bytes > root_at + b.type()->AllocSize(*t->view_src)) {
        return absl::InternalError(absl::StrCat("view '", t->name,
                                                "' reaches past its source '",
                                                t->view_src->name, "'"));
      }
    }
  }

  // Lifetimes of tensors owning memory.
  absl::flat_hash_map<const Tensor*, Life> life;
  absl::flat_hash_map<const Tensor*, int> readers;
  for (const Tensor* t : all) {
    if (t->view_src != nullptr) continue;
    auto it = node_index.find(t);
    const int32_t def = it == node_index.end() ? -1 : it->second;
    life[t] = Life{def, def};
  }
  for (int32_t i = 0; i < n; ++i) {
    const Tensor* node = graph.nodes()[i];
    for (const Tensor* s : node->src) {
      if (s == nullptr) continue;
      ++readers[s];
      auto it = life.find(Root(s));
      if (it != life.end()) it->second.last = std::max(it->second.last, i);
    }
    if (node->view_src != nullptr) {
      auto it = life.find(node->view_src);
      if (it != life.end()) it->second.last = std::max(it->second.last, i);
    }
  }
  for (const Tensor* t : all) {
    auto it = life.find(Root(t));
    if (it == life.end()) continue;
    const bool is_node = t->op != Op::kNone;
    if (t->HasFlag(kTensorFlagOutput) || (is_node && readers[t] == 0) ||
        (!is_node && readers[t] == 0)) {
      it->second.last = kForever;
    }
    if (t->HasFlag(kTensorFlagInput)) {
      it->second.def = -1;
      it->second.last = kForever;
    }
  }

  // Legal in-place: `node` over `root` (root dies at node through src[0]).
  auto legal_in_place = [&](const Tensor* node, const Tensor* root) {
    auto ni = node_index.find(node);
    if (ni == node_index.end() || !OpCanRunInPlace(node->op)) return false;
    const Tensor* s0 = node->src[0];
    if (s0 == nullptr || Root(s0) != root || node_index.count(root) == 0) {
      return false;
    }
    constexpr uint32_t kPinned =
        kTensorFlagInput | kTensorFlagOutput | kTensorFlagWeight;
    if ((root->flags & kPinned) != 0 || (s0->flags & kPinned) != 0) {
      return false;
    }
    if (life[root].last != ni->second || life[node].def != ni->second) {
      return false;
    }
    if (node->data != root->data || s0->data != node->data) return false;
    if (s0->dtype != node->dtype || s0->ne != node->ne || s0->nb != node->nb) {
      return false;
    }
    for (int j = 1; j < kMaxSrc; ++j) {
      const Tensor* s = node->src[static_cast<size_t>(j)];
      if (s != nullptr && Root(s) == root) return false;
    }
    return true;
  };

  // (b), (c): overlapping bytes need disjoint lifetimes.
  struct Owned {
    const Tensor* t;
    uintptr_t begin, end;
    Life life;
  };
  std::vector<Owned> owned;
  for (const auto& [t, l] : life) {
    if (t->buffer == nullptr || t->buffer->usage() != BufferUsage::kCompute) {
      continue;
    }
    const uintptr_t at = Addr(t->data);
    owned.push_back(Owned{t, at, at + t->buffer->type()->AllocSize(*t), l});
  }
  std::sort(owned.begin(), owned.end(),
            [](const Owned& a, const Owned& b) { return a.begin < b.begin; });
  int in_place = 0;
  for (size_t i = 0; i < owned.size(); ++i) {
    for (size_t j = i + 1; j < owned.size() && owned[j].begin < owned[i].end;
         ++j) {
      const Owned& a = owned[i];
      const Owned& b = owned[j];
      if (a.t->buffer != b.t->buffer || a.end <= b.begin || b.end <= a.begin) {
        continue;
      }
      if (a.life.last < b.life.def || b.life.last < a.life.def) continue;
      if (legal_in_place(a.t, b.t) || legal_in_place(b.t, a.t)) {
        ++in_place;
        continue;
      }
      return absl::InternalError(absl::StrCat(
          "'", a.t->name, "' (steps ", a.life.def, "..", a.life.last, ") and '",
          b.t->name, "' (steps ", b.life.def, "..", b.life.last,
          ") share bytes of buffer ", Addr(a.t->buffer)));
    }
  }
  if (num_in_place != nullptr) *num_in_place = in_place;
  return absl::OkStatus();
}

}  // namespace ferry::testing
