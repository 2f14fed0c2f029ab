#include "ferry/sched/batch.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ferry/backends/buffer.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {

absl::StatusOr<std::unique_ptr<CapturedBatch>> CaptureBatch(const Graph& graph,
                                                            const BatchIo& io) {
  auto batch = std::make_unique<CapturedBatch>();
  auto is_leaf = [&](const Tensor* t) {
    return std::find(graph.leafs().begin(), graph.leafs().end(), t) !=
           graph.leafs().end();
  };
  size_t total = 0;
  for (const BatchIo::Input& in : io.inputs) {
    if (in.tensor == nullptr || in.data == nullptr) {
      return absl::InvalidArgumentError(
          "a batch input has a null tensor or data");
    }
    if (!in.tensor->HasFlag(kTensorFlagInput) || in.tensor->op != Op::kNone ||
        !is_leaf(in.tensor)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch input '", in.tensor->name,
          "' is not a leaf of the graph flagged input (SetInput)"));
    }
    if (in.size != static_cast<size_t>(in.tensor->NumBytes())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch input '", in.tensor->name, "' ", in.tensor->ShapeString(),
          " has ", in.tensor->NumBytes(), " bytes, not ", in.size));
    }
    if (batch->Find(in.tensor) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch input '", in.tensor->name, "' is given twice"));
    }
    batch->inputs.push_back({in.tensor, total, in.size});
    total += in.size;
  }
  // Inputs the caller did not list are read from their own memory, now.
  for (const Tensor* leaf : graph.leafs()) {
    if (!leaf->HasFlag(kTensorFlagInput) || batch->Find(leaf) != nullptr) {
      continue;
    }
    if (leaf->data == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "graph input '", leaf->name,
          "' has no data: pass it in BatchIo, or AllocGraph and set it first"));
    }
    const size_t size = static_cast<size_t>(leaf->NumBytes());
    batch->inputs.push_back({leaf, total, size});
    total += size;
  }
  batch->bytes.resize(total);
  for (const CapturedBatch::Input& c : batch->inputs) {
    auto given =
        std::find_if(io.inputs.begin(), io.inputs.end(),
                     [&](const auto& in) { return in.tensor == c.tensor; });
    if (given != io.inputs.end()) {
      std::memcpy(batch->bytes.data() + c.offset, given->data, c.size);
    } else {
      FERRY_RETURN_IF_ERROR(
          GetTensorData(*c.tensor, batch->bytes.data() + c.offset, 0, c.size),
          "reading graph input '", c.tensor->name, "'");
    }
  }
  for (const BatchIo::Output& out : io.outputs) {
    if (out.tensor == nullptr || out.data == nullptr) {
      return absl::InvalidArgumentError(
          "a batch output has a null tensor or data");
    }
    const bool in_graph = is_leaf(out.tensor) ||
                          std::find(graph.nodes().begin(), graph.nodes().end(),
                                    out.tensor) != graph.nodes().end();
    if (!in_graph || !out.tensor->HasFlag(kTensorFlagOutput)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch output '", out.tensor->name,
          "' is not a tensor of the graph flagged output (SetOutput): other "
          "memory may be reused while the graph runs"));
    }
    if (out.size != static_cast<size_t>(out.tensor->NumBytes())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch output '", out.tensor->name, "' ", out.tensor->ShapeString(),
          " has ", out.tensor->NumBytes(), " bytes, not ", out.size));
    }
    batch->outputs.push_back(out);
  }
  return batch;
}

}  // namespace ferry
