// Host memory buffers: the buffer type every host-side backend builds on.
//
// HostBufferType allocates aligned host memory (the CPU device's default
// type uses it with 64-byte alignment). WrapHostMemory makes a buffer over a
// caller's pointer without taking ownership (ggml's buffer_from_host_ptr),
// e.g. for memory-mapped weights.
#ifndef FERRY_BACKENDS_HOST_BUFFER_H_
#define FERRY_BACKENDS_HOST_BUFFER_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/buffer.h"

namespace ferry {

// Allocates `size` bytes of host memory aligned to `alignment` (a power of
// two; a zero size still gets a unique pointer), to be freed with
// std::free; null if out of memory. Allocations of 2 MiB or more start on
// a huge page and are advised for transparent huge pages.
void* AllocateHostMemory(size_t size, size_t alignment);

// Thread-safe.
class HostBufferType : public BufferType {
 public:
  // `alignment` must be a power of two. `device` may be null.
  HostBufferType(std::string name, size_t alignment, Device* device,
                 size_t max_size = SIZE_MAX);

  absl::string_view name() const override { return name_; }
  size_t alignment() const override { return alignment_; }
  size_t max_size() const override { return max_size_; }
  bool is_host() const override { return true; }
  Device* device() const override { return device_; }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;

 private:
  std::string name_;
  size_t alignment_;
  Device* device_;
  size_t max_size_;
};

// A buffer of host memory; owns it unless made by WrapHostMemory. Other
// host-memory buffers (sim's pinned memory, the fake device's) derive from
// it for its memcpy transfers and own their memory themselves.
// Thread-compatible.
class HostBuffer : public Buffer {
 public:
  ~HostBuffer() override;

  absl::Status SetTensor(Tensor& tensor, const void* data, size_t offset,
                         size_t size) override;
  absl::Status GetTensor(const Tensor& tensor, void* data, size_t offset,
                         size_t size) override;
  absl::Status MemsetTensor(Tensor& tensor, uint8_t value, size_t offset,
                            size_t size) override;
  absl::Status CopyTensorFrom(const Tensor& src, Tensor& dst) override;
  absl::Status Clear(uint8_t value) override;

 protected:
  // Frees `base` with std::free on destruction if `owned`; a subclass that
  // passes false releases its memory itself.
  HostBuffer(BufferType* type, void* base, size_t size, bool owned)
      : Buffer(type, base, size), owned_(owned) {}

 private:
  friend class HostBufferType;
  friend absl::StatusOr<std::unique_ptr<Buffer>> WrapHostMemory(BufferType*,
                                                                void*, size_t);

  bool owned_;
};

// Makes a buffer of type `type` (which must be a host type) over `size`
// bytes at `data`, which the caller keeps alive and frees after the buffer.
absl::StatusOr<std::unique_ptr<Buffer>> WrapHostMemory(BufferType* type,
                                                       void* data, size_t size);

}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_BUFFER_H_
