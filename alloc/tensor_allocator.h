// TensorAllocator: linear placement of tensors into one buffer.
//
// For weights and statically allocated inputs: each tensor goes at the next
// offset aligned to the buffer type's alignment; nothing is ever freed. Views
// are placed at their source's memory.
#ifndef FERRY_ALLOC_TENSOR_ALLOCATOR_H_
#define FERRY_ALLOC_TENSOR_ALLOCATOR_H_

#include <cstddef>

#include "absl/status/status.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/tensor.h"

namespace ferry {

// Does not take ownership of the buffer, which must outlive the allocator
// and the tensors placed in it.
// Thread-compatible.
class TensorAllocator {
 public:
  // Places tensors from offset 0 of `buffer`.
  explicit TensorAllocator(Buffer& buffer) : buffer_(&buffer) {}

  // Places `tensor`: a view at view_src->data + view_offset (its source must
  // be placed), any other tensor at the next aligned offset. Returns
  // FailedPreconditionError for a tensor already placed or a view of an
  // unplaced source, ResourceExhaustedError when the buffer is full (the
  // tensor and the offset are left unchanged).
  absl::Status Allocate(Tensor& tensor);

  // Returns the aligned offset the next tensor would get.
  size_t offset() const { return offset_; }
  Buffer& buffer() const { return *buffer_; }

 private:
  Buffer* buffer_;
  size_t offset_ = 0;
};

}  // namespace ferry

#endif  // FERRY_ALLOC_TENSOR_ALLOCATOR_H_
