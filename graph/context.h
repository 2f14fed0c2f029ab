// Context: owns the Tensor metadata of one model or one graph.
//
// Tensors live in an arena with stable addresses (creating thousands is cheap:
// one std::deque slot each, no data). Data is placed later by an allocator;
// AllocateHostData() gives every tensor host memory, for tests and for the
// reference evaluator.
#ifndef FERRY_GRAPH_CONTEXT_H_
#define FERRY_GRAPH_CONTEXT_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/tensor.h"

namespace ferry {

// Creates and owns tensors. Pointers returned stay valid until the Context is
// destroyed (also across moves of the Context). Host memory from
// AllocateHostData() is owned by the Context too.
// Thread-compatible.
class Context {
 public:
  Context() = default;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  Context(Context&&) = default;
  Context& operator=(Context&&) = default;
  ~Context() = default;

  // Creates a contiguous leaf tensor of `shape` (ne[0] first; at most 4 dims,
  // missing trailing dims are 1; an empty shape is a scalar). Returns
  // InvalidArgumentError for more than 4 dims, negative dims, ne[0] not a
  // multiple of the dtype's block size, or a byte size that overflows int64.
  absl::StatusOr<Tensor*> NewTensor(DType dtype,
                                    absl::Span<const int64_t> shape,
                                    absl::string_view name = "");

  // Stores a copy of `tensor` in the arena and returns its stable address.
  // Validates nothing: this is for graph-building code (ops.h, graph
  // rewrites) that has already checked the tensor.
  Tensor* AddTensor(Tensor tensor);

  // All tensors, in creation order.
  absl::Span<Tensor* const> tensors() const { return index_; }
  int64_t num_tensors() const { return static_cast<int64_t>(index_.size()); }

  // Gives every tensor that has no data yet host memory: views get their
  // view source's data plus view_offset, others a fresh 64-byte-aligned
  // zeroed block (one allocation per call). `buffer` stays null. Calling it
  // again places only tensors created since. Returns FailedPreconditionError
  // when a view's source has no data and is not in this context.
  absl::Status AllocateHostData();

 private:
  struct FreeDeleter {
    void operator()(std::byte* p) const;
  };

  std::deque<Tensor> arena_;
  std::vector<Tensor*> index_;
  std::vector<std::unique_ptr<std::byte[], FreeDeleter>> host_blocks_;
};

}  // namespace ferry

#endif  // FERRY_GRAPH_CONTEXT_H_
