#include "ferry/backends/node_snapshot.h"

#include "absl/container/flat_hash_map.h"
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

}  // namespace

absl::StatusOr<NodeSnapshot> NodeSnapshot::Make(absl::Span<Tensor* const> nodes,
                                                Locate locate) {
  NodeSnapshot snapshot;
  absl::flat_hash_map<const Tensor*, Tensor*> copy_of;
  copy_of.reserve(nodes.size() * 2);
  auto copy = [&](const Tensor& t, absl::string_view role,
                  const Tensor& node) -> absl::StatusOr<Tensor*> {
    auto [it, inserted] = copy_of.try_emplace(&t, nullptr);
    if (!inserted) return it->second;
    absl::StatusOr<void*> data = locate(t);
    if (!data.ok()) {
      copy_of.erase(&t);
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
    it->second = &c;
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
