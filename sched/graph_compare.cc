#include "ferry/sched/graph_compare.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/op.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {
namespace {

size_t Aligned(size_t n, size_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

// Downloads a contiguous tensor as floats.
absl::StatusOr<std::vector<double>> Download(const Tensor& t) {
  if (!t.IsContiguous()) {
    return absl::UnimplementedError(
        absl::StrCat("cannot compare non-contiguous '", t.name, "'"));
  }
  if (IsQuantized(t.dtype)) {
    return absl::UnimplementedError(absl::StrCat(
        "cannot compare '", t.name, "' of block type ", DTypeName(t.dtype)));
  }
  const size_t n = static_cast<size_t>(t.NumElements());
  std::vector<char> raw(static_cast<size_t>(t.NumBytes()));
  FERRY_RETURN_IF_ERROR(GetTensorData(t, raw.data()));
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::kF32: {
        float v;
        std::memcpy(&v, raw.data() + 4 * i, 4);
        out[i] = v;
        break;
      }
      case DType::kF16: {
        Half h;
        std::memcpy(&h.bits, raw.data() + 2 * i, 2);
        out[i] = F16ToF32(h);
        break;
      }
      case DType::kBF16: {
        BFloat16 b;
        std::memcpy(&b.bits, raw.data() + 2 * i, 2);
        out[i] = BF16ToF32(b);
        break;
      }
      case DType::kI32: {
        int32_t v;
        std::memcpy(&v, raw.data() + 4 * i, 4);
        out[i] = v;
        break;
      }
      default:  // Block types: refused above.
        break;
    }
  }
  return out;
}

double Nmse(const std::vector<double>& expected,
            const std::vector<double>& actual) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double d = actual[i] - expected[i];
    err += d * d;
    ref += expected[i] * expected[i];
  }
  if (std::isnan(err)) return err;
  return ref == 0 ? (err == 0 ? 0 : INFINITY) : err / ref;
}

}  // namespace

absl::StatusOr<GraphCopy> CopyGraph(const Graph& graph, Backend& backend) {
  GraphCopy copy;
  copy.ctx = std::make_unique<Context>();
  // Twins in original order (leafs, then nodes), sources remapped.
  std::vector<const Tensor*> originals;
  for (Tensor* t : graph.leafs()) originals.push_back(t);
  for (Tensor* t : graph.nodes()) originals.push_back(t);
  std::vector<Tensor*> twins(originals.size());
  absl::flat_hash_map<const Tensor*, Tensor*> twin_map;
  twin_map.reserve(originals.size());
  auto twin_of = [&](const Tensor* t) -> Tensor* {
    return t == nullptr ? nullptr : twin_map.at(t);
  };
  for (size_t i = 0; i < originals.size(); ++i) {
    Tensor twin = *originals[i];
    twin.buffer = nullptr;
    twin.data = nullptr;
    for (Tensor*& src : twin.src) src = twin_of(src);
    twin.view_src = twin_of(twin.view_src);
    twins[i] = copy.ctx->AddTensor(std::move(twin));
    twin_map[originals[i]] = twins[i];
  }
  BufferType& type = *backend.default_buffer_type();
  size_t total = 0;
  for (Tensor* t : twins) {
    if (t->view_src == nullptr) {
      total += Aligned(type.AllocSize(*t), type.alignment());
    }
  }
  FERRY_ASSIGN_OR_RETURN(copy.buffer,
                         type.Allocate(std::max<size_t>(total, 1)));
  size_t offset = 0;
  for (Tensor* t : twins) {
    if (t->view_src != nullptr) continue;
    FERRY_RETURN_IF_ERROR(PlaceTensor(*copy.buffer, *t, offset));
    offset += Aligned(type.AllocSize(*t), type.alignment());
  }
  for (Tensor* t : twins) {
    if (t->view_src != nullptr) FERRY_RETURN_IF_ERROR(PlaceView(*t));
  }
  for (Tensor* leaf : graph.leafs()) {
    if (leaf->data == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("leaf '", leaf->name, "' has no data to copy"));
    }
    FERRY_RETURN_IF_ERROR(CopyTensor(*leaf, *twin_of(leaf)));
  }
  std::vector<Tensor*> outputs;
  for (Tensor* node : graph.nodes()) outputs.push_back(twin_of(node));
  FERRY_ASSIGN_OR_RETURN(copy.graph, Graph::Build(outputs));
  if (copy.graph.num_nodes() != graph.num_nodes()) {
    return absl::InternalError("graph copy changed the number of nodes");
  }
  return copy;
}

absl::StatusOr<GraphComparison> CompareGraphBackends(const Graph& graph,
                                                     Backend& a, Backend& b,
                                                     double max_nmse) {
  FERRY_ASSIGN_OR_RETURN(GraphCopy on_a, CopyGraph(graph, a));
  FERRY_ASSIGN_OR_RETURN(GraphCopy on_b, CopyGraph(graph, b));
  GraphComparison result;
  for (int64_t i = 0; i < graph.num_nodes(); ++i) {
    Tensor* node_a = on_a.graph.node(i);
    Tensor* node_b = on_b.graph.node(i);
    if (node_a->op == Op::kNone || IsViewOp(node_a->op)) continue;
    for (auto [backend, node] :
         {std::pair{&a, node_a}, std::pair{&b, node_b}}) {
      if (absl::Status op = backend->CheckOp(*node); !op.ok()) {
        return absl::UnimplementedError(absl::StrCat(
            backend->name(), " does not support node ", i, " '",
            graph.node(i)->name, "' (", OpName(node->op), "): ", op.message()));
      }
      FERRY_RETURN_IF_ERROR(backend->Compute(NodeSpan(&node, 1)));
    }
    FERRY_ASSIGN_OR_RETURN(std::vector<double> va, Download(*node_a));
    FERRY_ASSIGN_OR_RETURN(std::vector<double> vb, Download(*node_b));
    const double nmse = Nmse(va, vb);
    ++result.nodes_compared;
    if (!(nmse <= result.max_nmse)) result.max_nmse = nmse;
    if (!(nmse <= max_nmse) && result.first_mismatch < 0) {
      result.first_mismatch = i;
      result.mismatch_name = graph.node(i)->name;
      result.mismatch_op = std::string(OpName(node_a->op));
      result.mismatch_nmse = nmse;
    }
  }
  return result;
}

}  // namespace ferry
