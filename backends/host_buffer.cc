#include "ferry/backends/host_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {

void* AllocateHostMemory(size_t size, size_t alignment) {
  // Allocations of a huge page or more start on one and ask for huge
  // pages: a copy to or from another process (UCX's cross-memory attach,
  // between a client and a worker on one host) walks a page table entry per
  // page, and runs at nearly twice the speed over huge pages; the CPU's
  // GEMMs streaming packed weights ran ~10% faster.
  constexpr size_t kHugePage = size_t{2} << 20;
  // posix_memalign takes multiples of the pointer size only.
  const size_t start = std::max(
      {alignment, sizeof(void*), size >= kHugePage ? kHugePage : size_t{0}});
  // A zero size still gets a valid, unique pointer.
  const size_t rounded =
      std::max(alignment, (size + alignment - 1) / alignment * alignment);
  void* base = nullptr;
  if (posix_memalign(&base, start, rounded) != 0) return nullptr;
  if (size >= kHugePage) {
    // Advice only: where huge pages are off it fails and nothing changes.
    // The kernel backs the whole huge pages in the range; the tail past
    // the last one stays in small pages.
    madvise(base, rounded / kHugePage * kHugePage, MADV_HUGEPAGE);
  }
  return base;
}

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
  void* base = AllocateHostMemory(size, alignment_);
  if (base == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name_, ": cannot allocate ", size, " bytes"));
  }
  return std::unique_ptr<Buffer>(new HostBuffer(this, base, size, true));
}

HostBuffer::~HostBuffer() {
  if (owned_) std::free(base());
}

// memmove throughout: a source may lie in device memory too (a remote
// worker's copy between two tensors of one buffer) and overlap the target.
absl::Status HostBuffer::SetTensor(Tensor& tensor, const void* data,
                                   size_t offset, size_t size) {
  std::memmove(static_cast<char*>(tensor.data) + offset, data, size);
  return absl::OkStatus();
}

absl::Status HostBuffer::GetTensor(const Tensor& tensor, void* data,
                                   size_t offset, size_t size) {
  std::memmove(data, static_cast<const char*>(tensor.data) + offset, size);
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
  std::memmove(dst.data, src.data, static_cast<size_t>(src.NumBytes()));
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
