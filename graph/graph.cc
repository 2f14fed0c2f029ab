#include "ferry/graph/graph.h"

#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "ferry/graph/op.h"

namespace ferry {
namespace {

// Each Build takes a fresh epoch; a tensor whose visit_mark is 2*epoch is on
// the search stack, 2*epoch+1 is finished, anything else is unvisited.
std::atomic<uint64_t> next_epoch{1};
std::atomic<uint64_t> next_graph_id{1};

struct Frame {
  Tensor* tensor;
  int next;  // Next source to visit: 0..kMaxSrc-1 are src, kMaxSrc view_src.
};

std::string Label(const Tensor& t) {
  return t.name.empty() ? std::string("(unnamed)")
                        : absl::StrCat("'", t.name, "'");
}

absl::Status CycleError(const std::vector<Frame>& stack, const Tensor* start) {
  std::vector<std::string> path;
  bool on_cycle = false;
  for (const Frame& frame : stack) {
    on_cycle = on_cycle || frame.tensor == start;
    if (on_cycle) {
      path.push_back(
          absl::StrCat(OpName(frame.tensor->op), " ", Label(*frame.tensor)));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("graph: cycle through ", Label(*start), ": ",
                   absl::StrJoin(path, " -> "), " -> ", Label(*start)));
}

}  // namespace

absl::StatusOr<Graph> Graph::Build(absl::Span<Tensor* const> outputs) {
  const uint64_t epoch = next_epoch.fetch_add(1, std::memory_order_relaxed);
  const uint64_t on_stack = 2 * epoch;
  const uint64_t done = 2 * epoch + 1;

  Graph graph;
  graph.id_ = next_graph_id.fetch_add(1, std::memory_order_relaxed);
  std::vector<Frame> stack;
  stack.reserve(64);
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor* output = outputs[i];
    if (output == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph: output ", i, " is null"));
    }
    if (output->visit_mark == done) continue;
    output->visit_mark = on_stack;
    stack.push_back({output, 0});
    while (!stack.empty()) {
      Frame& frame = stack.back();
      Tensor* child = nullptr;
      while (child == nullptr && frame.next <= kMaxSrc) {
        Tensor* candidate = frame.next < kMaxSrc ? frame.tensor->src[frame.next]
                                                 : frame.tensor->view_src;
        ++frame.next;
        if (candidate == nullptr || candidate->visit_mark == done) continue;
        if (candidate->visit_mark == on_stack) {
          return CycleError(stack, candidate);
        }
        child = candidate;
      }
      if (child != nullptr) {
        child->visit_mark = on_stack;
        stack.push_back({child, 0});  // Invalidates `frame`.
        continue;
      }
      Tensor* finished = frame.tensor;
      stack.pop_back();
      finished->visit_mark = done;
      if (finished->op == Op::kNone) {
        graph.leafs_.push_back(finished);
      } else {
        graph.nodes_.push_back(finished);
      }
    }
  }
  return graph;
}

Graph::Graph(Graph&& other) noexcept
    : id_(std::exchange(other.id_, 0)),
      nodes_(std::move(other.nodes_)),
      leafs_(std::move(other.leafs_)) {
  other.nodes_.clear();
  other.leafs_.clear();
}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this == &other) return *this;
  id_ = std::exchange(other.id_, 0);
  nodes_ = std::move(other.nodes_);
  leafs_ = std::move(other.leafs_);
  other.nodes_.clear();
  other.leafs_.clear();
  return *this;
}

std::string NodeSpanName(const Tensor& node) {
  return absl::StrCat(OpName(node.op), " ",
                      node.name.empty() ? "(unnamed)" : node.name);
}

absl::StatusOr<GraphView> Graph::NodeRange(int64_t begin, int64_t end) const {
  if (begin < 0 || begin > end || end > num_nodes()) {
    return absl::OutOfRangeError(absl::StrCat("graph: node range [", begin,
                                              ", ", end, ") outside [0, ",
                                              num_nodes(), ")"));
  }
  return GraphView(nodes_).subspan(static_cast<size_t>(begin),
                                   static_cast<size_t>(end - begin));
}

namespace {

// "leaf 3" / "node 7" for tensors of the graph, "external" otherwise.
class Ids {
 public:
  explicit Ids(const Graph& graph) {
    ids_.reserve(graph.nodes().size() + graph.leafs().size());
    for (size_t i = 0; i < graph.leafs().size(); ++i) {
      ids_[graph.leafs()[i]] = absl::StrCat("leaf ", i);
    }
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
      ids_[graph.nodes()[i]] = absl::StrCat("node ", i);
    }
  }
  std::string Get(const Tensor* t) const {
    auto it = ids_.find(t);
    return it == ids_.end() ? std::string("external") : it->second;
  }

 private:
  absl::flat_hash_map<const Tensor*, std::string> ids_;
};

std::string FlagsString(uint32_t flags) {
  std::string s;
  if (flags & kTensorFlagInput) absl::StrAppend(&s, " input");
  if (flags & kTensorFlagOutput) absl::StrAppend(&s, " output");
  if (flags & kTensorFlagWeight) absl::StrAppend(&s, " weight");
  return s;
}

std::string DotEscape(absl::string_view s) {
  return absl::StrReplaceAll(s, {{"\\", "\\\\"}, {"\"", "\\\""}});
}

}  // namespace

std::string DumpText(const Graph& graph) {
  const Ids ids(graph);
  std::string out;
  for (size_t i = 0; i < graph.leafs().size(); ++i) {
    const Tensor& t = *graph.leafs()[i];
    absl::StrAppend(&out, "leaf ", i, ": ", Label(t), " ", t.ShapeString(),
                    FlagsString(t.flags), "\n");
  }
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const Tensor& t = *graph.nodes()[i];
    absl::StrAppend(&out, "node ", i, ": ", OpName(t.op), " ", Label(t), " ",
                    t.ShapeString(), FlagsString(t.flags));
    const char* separator = " <- ";
    for (const Tensor* src : t.src) {
      if (src == nullptr) continue;
      absl::StrAppend(&out, separator, ids.Get(src), " ", Label(*src));
      separator = ", ";
    }
    if (t.view_src != nullptr) {
      absl::StrAppend(&out, " (view of ", ids.Get(t.view_src), " +",
                      t.view_offset, ")");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

std::string DumpDot(const Graph& graph) {
  const Ids ids(graph);
  const auto dot_id = [&](const Tensor* t) {
    return absl::StrCat("\"", ids.Get(t), "\"");
  };
  std::string out = "digraph ferry {\n  rankdir=BT;\n";
  for (const Tensor* t : graph.leafs()) {
    absl::StrAppend(&out, "  ", dot_id(t), " [shape=box, label=\"",
                    DotEscape(Label(*t)), "\\n", t->ShapeString(), "\"];\n");
  }
  for (const Tensor* t : graph.nodes()) {
    absl::StrAppend(&out, "  ", dot_id(t), " [label=\"", OpName(t->op), "\\n",
                    DotEscape(Label(*t)), "\\n", t->ShapeString(), "\"];\n");
  }
  for (const Tensor* t : graph.nodes()) {
    for (int i = 0; i < kMaxSrc; ++i) {
      if (t->src[i] == nullptr) continue;
      absl::StrAppend(&out, "  ", dot_id(t->src[i]), " -> ", dot_id(t),
                      " [label=\"", i, "\"];\n");
    }
    if (t->view_src != nullptr) {
      absl::StrAppend(&out, "  ", dot_id(t->view_src), " -> ", dot_id(t),
                      " [style=dashed];\n");
    }
  }
  absl::StrAppend(&out, "}\n");
  return out;
}

}  // namespace ferry
