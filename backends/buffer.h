// Buffer types and buffers: where tensor data lives.
//
// A BufferType describes a kind of memory (a device's memory, pinned host
// memory, plain host memory) and allocates Buffers of it. A Buffer owns one
// allocation and moves tensor data in and out of it. Whether the host may
// dereference a buffer's addresses is the type's `is_host()`; for device
// memory, `base()` is an address in the device's own space and tensor data is
// reached only through SetTensor/GetTensor (or a backend's async forms).
//
// Free functions at the bottom place tensors in buffers and move their data,
// checking bounds: ferry's versions of ggml_backend_tensor_alloc/set/get.
#ifndef FERRY_BACKENDS_BUFFER_H_
#define FERRY_BACKENDS_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/graph/tensor.h"

namespace ferry {

class Buffer;
class Device;

enum class BufferUsage : uint8_t {
  kAny = 0,
  kWeights = 1,  // Holds weights: schedulers pin ops that use them here.
  kCompute = 2,  // Holds activations planned by the graph allocator.
};

absl::string_view BufferUsageName(BufferUsage usage);

// Thread-safe (allocation may be called from any thread).
class BufferType {
 public:
  virtual ~BufferType() = default;

  virtual absl::string_view name() const = 0;
  // Alignment of every tensor placed in buffers of this type.
  virtual size_t alignment() const = 0;
  // Largest single allocation; larger sets of tensors span several buffers.
  virtual size_t max_size() const { return SIZE_MAX; }
  // Bytes a tensor occupies in this type (may pad, e.g. for vector tails).
  virtual size_t AllocSize(const Tensor& tensor) const;
  // True if the host can read and write the memory directly.
  virtual bool is_host() const = 0;
  // The device whose memory this is; nullptr for plain host memory.
  virtual Device* device() const = 0;

  // Allocates `size` bytes. Fails with ResourceExhausted (not a crash) when
  // the memory cannot be had, and InvalidArgument above max_size().
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) = 0;
};

// Thread-compatible: concurrent data transfers into disjoint tensors are safe.
class Buffer {
 public:
  virtual ~Buffer() = default;

  BufferType* type() const { return type_; }
  size_t size() const { return size_; }
  // Start of the allocation in the owning device's address space.
  void* base() const { return base_; }
  bool is_host() const { return type_->is_host(); }
  BufferUsage usage() const { return usage_; }
  void set_usage(BufferUsage usage) { usage_ = usage; }

  // Called when `tensor` is placed in this buffer (hook for backends that
  // keep per-tensor state). `tensor.data` and `tensor.buffer` are set.
  virtual absl::Status InitTensor(Tensor& tensor);

  // Synchronous data transfers, in bytes relative to the tensor's data.
  // Offsets and sizes are checked by the free functions below.
  virtual absl::Status SetTensor(Tensor& tensor, const void* data,
                                 size_t offset, size_t size) = 0;
  virtual absl::Status GetTensor(const Tensor& tensor, void* data,
                                 size_t offset, size_t size) = 0;
  virtual absl::Status MemsetTensor(Tensor& tensor, uint8_t value,
                                    size_t offset, size_t size) = 0;
  // Copies all of `src` (in another buffer) into `dst` (in this one) if this
  // buffer can do it directly; Unimplemented otherwise.
  virtual absl::Status CopyTensorFrom(const Tensor& src, Tensor& dst);
  // Fills the whole buffer with `value`.
  virtual absl::Status Clear(uint8_t value) = 0;
  // Drops per-tensor state (InitTensor's), before the buffer is reused.
  virtual void Reset() {}

 protected:
  Buffer(BufferType* type, void* base, size_t size)
      : type_(type), base_(base), size_(size) {}

 private:
  BufferType* type_;
  void* base_;
  size_t size_;
  BufferUsage usage_ = BufferUsage::kAny;
};

// Places `tensor` at `offset` bytes into `buffer`: sets tensor.buffer and
// tensor.data and calls InitTensor. Fails if the tensor does not fit, the
// offset breaks the type's alignment, or the tensor is already placed.
absl::Status PlaceTensor(Buffer& buffer, Tensor& tensor, size_t offset);

// Places a view at its source's memory (view_src->data + view_offset).
absl::Status PlaceView(Tensor& view);

// Copies bytes [offset, offset + size) of host memory `data` into `tensor`.
absl::Status SetTensorData(Tensor& tensor, const void* data, size_t offset,
                           size_t size);
// Copies bytes [offset, offset + size) of `tensor` into host memory `data`.
absl::Status GetTensorData(const Tensor& tensor, void* data, size_t offset,
                           size_t size);
// Convenience forms for the whole tensor.
absl::Status SetTensorData(Tensor& tensor, const void* data);
absl::Status GetTensorData(const Tensor& tensor, void* data);

// Copies all of `src` into `dst` (same byte size), between any two buffers:
// directly when the destination's buffer can, else through host memory.
absl::Status CopyTensor(const Tensor& src, Tensor& dst);

}  // namespace ferry

#endif  // FERRY_BACKENDS_BUFFER_H_
