#include "ferry/alloc/tensor_allocator.h"

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {

absl::Status TensorAllocator::Allocate(Tensor& tensor) {
  if (tensor.buffer != nullptr || tensor.data != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensor '", tensor.name, "' is already placed"));
  }
  if (tensor.view_src != nullptr) return PlaceView(tensor);
  const BufferType& type = *buffer_->type();
  const size_t alignment = type.alignment();
  const size_t size = type.AllocSize(tensor);
  if (offset_ > buffer_->size() || size > buffer_->size() - offset_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "tensor '", tensor.name, "' ", tensor.ShapeString(), " (", size,
        " bytes) does not fit: ",
        buffer_->size() - std::min(offset_, buffer_->size()), " of ",
        buffer_->size(), " bytes left in the ", type.name(), " buffer"));
  }
  FERRY_RETURN_IF_ERROR(PlaceTensor(*buffer_, tensor, offset_));
  const size_t end = offset_ + size;
  offset_ = (end + alignment - 1) / alignment * alignment;
  return absl::OkStatus();
}

}  // namespace ferry
