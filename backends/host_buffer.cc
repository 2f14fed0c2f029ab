#include "ferry/backends/host_buffer.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {

HostBufferType::HostBufferType(std::string name, size_t alignment,
                               Device* device, size_t max_size)
    : name_(std::move(name)),
      alignment_(alignment),
      device_(device),
      max_size_(max_size) {
  FERRY_CHECK(alignment_ > 0 && (alignment_ & (alignment_ - 1)) == 0);
}

absl::StatusOr<std::unique_ptr<Buffer>> HostBufferType::Allocate(size_t size) {
  if (size > max_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": allocation of ", size,
                     " bytes exceeds the maximum of ", max_size_));
  }
  // aligned_alloc needs a multiple of the alignment, and a zero-size buffer
  // still gets a valid, unique base.
  const size_t rounded =
      std::max(alignment_, (size + alignment_ - 1) / alignment_ * alignment_);
  void* base = std::aligned_alloc(alignment_, rounded);
  if (base == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name_, ": cannot allocate ", size, " bytes"));
  }
  return std::unique_ptr<Buffer>(new HostBuffer(this, base, size, true));
}

HostBuffer::~HostBuffer() {
  if (owned_) std::free(base());
}

absl::Status HostBuffer::SetTensor(Tensor& tensor, const void* data,
                                   size_t offset, size_t size) {
  std::memcpy(static_cast<char*>(tensor.data) + offset, data, size);
  return absl::OkStatus();
}

absl::Status HostBuffer::GetTensor(const Tensor& tensor, void* data,
                                   size_t offset, size_t size) {
  std::memcpy(data, static_cast<const char*>(tensor.data) + offset, size);
  return absl::OkStatus();
}

absl::Status HostBuffer::MemsetTensor(Tensor& tensor, uint8_t value,
                                      size_t offset, size_t size) {
  std::memset(static_cast<char*>(tensor.data) + offset, value, size);
  return absl::OkStatus();
}

absl::Status HostBuffer::CopyTensorFrom(const Tensor& src, Tensor& dst) {
  if (src.buffer == nullptr || !src.buffer->is_host()) {
    return Buffer::CopyTensorFrom(src, dst);
  }
  std::memcpy(dst.data, src.data, static_cast<size_t>(src.NumBytes()));
  return absl::OkStatus();
}

absl::Status HostBuffer::Clear(uint8_t value) {
  std::memset(base(), value, size());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Buffer>> WrapHostMemory(BufferType* type,
                                                       void* data,
                                                       size_t size) {
  if (type == nullptr || !type->is_host()) {
    return absl::InvalidArgumentError(
        "WrapHostMemory needs a host buffer type");
  }
  if (data == nullptr) {
    return absl::InvalidArgumentError("WrapHostMemory of a null pointer");
  }
  if (reinterpret_cast<uintptr_t>(data) % type->alignment() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WrapHostMemory: pointer is not aligned to ", type->alignment(),
        " bytes as ", type->name(), " requires"));
  }
  return std::unique_ptr<Buffer>(new HostBuffer(type, data, size, false));
}

}  // namespace ferry
