#include "ferry/backends/node_snapshot.h"

#include "absl/strings/str_cat.h"
#include "ferry/graph/op.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {
namespace {

// Copies what kernels read; not the name (kernels never read it, and a long
// one would allocate) nor the graph-building scratch.
void CopyMetadata(const Tensor& from, Tensor& to) {
  to.dtype = from.dtype;
  to.ne = from.ne;
  to.nb = from.nb;
  to.op = from.op;
  to.op_params = from.op_params;
  to.view_offset = from.view_offset;
  to.flags = from.flags;
  to.buffer = from.buffer;
}

// Tensor -> its copy: open addressing on the pointer, sized for the worst
// case up front (a snapshot runs on every enqueue; a node-based map would
// cost more than the copies).
class CopyIndex {
 public:
  explicit CopyIndex(size_t max_entries) {
    size_t capacity = 16;
    while (capacity < 2 * max_entries) capacity *= 2;
    keys_.assign(capacity, nullptr);
    values_.resize(capacity);
    mask_ = capacity - 1;
  }
  // The slot for `key`: its value if present, else an empty slot to fill.
  Tensor*& Find(const Tensor* key, bool* found) {
    size_t i = (reinterpret_cast<uintptr_t>(key) * 0x9E3779B97F4A7C15u) >> 20;
    for (;; ++i) {
      i &= mask_;
      if (keys_[i] == key) {
        *found = true;
        return values_[i];
      }
      if (keys_[i] == nullptr) {
        *found = false;
        keys_[i] = key;
        return values_[i];
      }
    }
  }

 private:
  std::vector<const Tensor*> keys_;
  std::vector<Tensor*> values_;
  size_t mask_ = 0;
};

}  // namespace

absl::StatusOr<NodeSnapshot> NodeSnapshot::Make(absl::Span<Tensor* const> nodes,
                                                Locate locate) {
  NodeSnapshot snapshot;
  const size_t max_copies = nodes.size() * (1 + kMaxSrc);
  snapshot.copies_.reserve(max_copies);
  CopyIndex copy_of(max_copies);
  auto copy = [&](const Tensor& t, absl::string_view role,
                  const Tensor& node) -> absl::StatusOr<Tensor*> {
    bool found = false;
    Tensor*& slot = copy_of.Find(&t, &found);
    if (found) return slot;
    absl::StatusOr<void*> data = locate(t);
    if (!data.ok()) {
      if (&t == &node) {
        return absl::Status(
            data.status().code(),
            absl::StrCat("node '", node.name, "' (", OpName(node.op),
                         "): ", data.status().message()));
      }
      return absl::Status(
          data.status().code(),
          absl::StrCat("node '", node.name, "' (", OpName(node.op), "), ", role,
                       " '", t.name, "': ", data.status().message()));
    }
    Tensor& c = snapshot.copies_.emplace_back();
    CopyMetadata(t, c);
    c.data = *data;
    slot = &c;
    return &c;
  };
  static constexpr const char* kSourceRole[kMaxSrc] = {"src[0]", "src[1]",
                                                       "src[2]", "src[3]"};
  for (Tensor* node : nodes) {
    if (node == nullptr) {
      return absl::InvalidArgumentError("a node to compute is null");
    }
    if (!IsComputeOp(node->op)) continue;
    FERRY_ASSIGN_OR_RETURN(Tensor * c, copy(*node, "node", *node));
    for (int i = 0; i < kMaxSrc; ++i) {
      const Tensor* src = node->src[i];
      if (src == nullptr) continue;
      FERRY_ASSIGN_OR_RETURN(c->src[i], copy(*src, kSourceRole[i], *node));
    }
    snapshot.nodes_.push_back(c);
  }
  return snapshot;
}

}  // namespace ferry
