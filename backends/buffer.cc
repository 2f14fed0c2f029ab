#include "ferry/backends/buffer.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {

absl::string_view BufferUsageName(BufferUsage usage) {
  switch (usage) {
    case BufferUsage::kAny:
      return "any";
    case BufferUsage::kWeights:
      return "weights";
    case BufferUsage::kCompute:
      return "compute";
  }
  return "?";
}

size_t BufferType::AllocSize(const Tensor& tensor) const {
  return static_cast<size_t>(tensor.NumBytes());
}

absl::Status Buffer::InitTensor(Tensor& /*tensor*/) { return absl::OkStatus(); }

absl::Status Buffer::CopyTensorFrom(const Tensor& src, Tensor& /*dst*/) {
  return absl::UnimplementedError(
      absl::StrCat(type_->name(), " cannot copy directly from ", src.name));
}

namespace {

absl::Status CheckRange(const Tensor& tensor, size_t offset, size_t size,
                        absl::string_view what) {
  const size_t bytes = static_cast<size_t>(tensor.NumBytes());
  if (tensor.buffer == nullptr || tensor.data == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " of tensor '", tensor.name, "': it has no buffer yet"));
  }
  if (offset > bytes || size > bytes - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        what, " of bytes [", offset, ", ", offset + size, ") of tensor '",
        tensor.name, "' ", tensor.ShapeString(), " of ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PlaceTensor(Buffer& buffer, Tensor& tensor, size_t offset) {
  // A graph allocator's placement is disposable (and its buffer may be
  // gone): only an owner's placement counts as placed.
  if (HasPresetMemory(tensor)) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensor '", tensor.name, "' is already placed"));
  }
  const size_t bytes = buffer.type()->AllocSize(tensor);
  if (offset > buffer.size() || bytes > buffer.size() - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("tensor '", tensor.name, "' ", tensor.ShapeString(), " (",
                     bytes, " bytes) at offset ", offset,
                     " does not fit buffer of ", buffer.size(), " bytes"));
  }
  const size_t alignment = buffer.type()->alignment();
  const uintptr_t address = reinterpret_cast<uintptr_t>(buffer.base()) + offset;
  if (address % alignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensor.name, "' at offset ", offset, " breaks the ",
        alignment, "-byte alignment of ", buffer.type()->name()));
  }
  tensor.buffer = &buffer;
  tensor.data = static_cast<char*>(buffer.base()) + offset;
  tensor.flags &= ~static_cast<uint32_t>(kTensorFlagAllocated);
  absl::Status status = buffer.InitTensor(tensor);
  if (!status.ok()) {
    tensor.buffer = nullptr;
    tensor.data = nullptr;
  }
  return status;
}

absl::Status PlaceView(Tensor& view) {
  Tensor* source = view.view_src;
  if (source == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", view.name, "' is not a view"));
  }
  if (source->buffer == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("view '", view.name, "' of '", source->name,
                     "': the source has no buffer yet"));
  }
  view.buffer = source->buffer;
  view.data = static_cast<char*>(source->data) + view.view_offset;
  // As disposable as the memory it views.
  view.flags = DescriptiveFlags(view) | (source->flags & kTensorFlagAllocated);
  return source->buffer->InitTensor(view);
}

absl::Status SetTensorData(Tensor& tensor, const void* data, size_t offset,
                           size_t size) {
  FERRY_RETURN_IF_ERROR(CheckRange(tensor, offset, size, "write"));
  if (size == 0) return absl::OkStatus();
  return tensor.buffer->SetTensor(tensor, data, offset, size);
}

absl::Status GetTensorData(const Tensor& tensor, void* data, size_t offset,
                           size_t size) {
  FERRY_RETURN_IF_ERROR(CheckRange(tensor, offset, size, "read"));
  if (size == 0) return absl::OkStatus();
  return tensor.buffer->GetTensor(tensor, data, offset, size);
}

absl::Status SetTensorData(Tensor& tensor, const void* data) {
  return SetTensorData(tensor, data, 0, static_cast<size_t>(tensor.NumBytes()));
}

absl::Status GetTensorData(const Tensor& tensor, void* data) {
  return GetTensorData(tensor, data, 0, static_cast<size_t>(tensor.NumBytes()));
}

absl::Status CopyTensor(const Tensor& src, Tensor& dst) {
  const size_t bytes = static_cast<size_t>(src.NumBytes());
  if (bytes != static_cast<size_t>(dst.NumBytes())) {
    return absl::InvalidArgumentError(
        absl::StrCat("copy from '", src.name, "' ", src.ShapeString(), " to '",
                     dst.name, "' ", dst.ShapeString(), ": byte sizes differ"));
  }
  FERRY_RETURN_IF_ERROR(CheckRange(src, 0, bytes, "copy"));
  FERRY_RETURN_IF_ERROR(CheckRange(dst, 0, bytes, "copy"));
  if (src.buffer->is_host()) {
    return dst.buffer->SetTensor(dst, src.data, 0, bytes);
  }
  if (dst.buffer->is_host()) {
    return src.buffer->GetTensor(src, dst.data, 0, bytes);
  }
  absl::Status direct = dst.buffer->CopyTensorFrom(src, dst);
  if (!absl::IsUnimplemented(direct)) return direct;
  std::vector<char> staging(bytes);
  FERRY_RETURN_IF_ERROR(src.buffer->GetTensor(src, staging.data(), 0, bytes));
  return dst.buffer->SetTensor(dst, staging.data(), 0, bytes);
}

}  // namespace ferry
