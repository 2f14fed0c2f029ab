// The CPU's buffer type for weights: matrices stored in the GEMM's panel
// layout (backends/host/internal/packed_layout.h), packed once when they are
// set instead of on every mul_mat, as ggml's CPU "repack" extra buffer types
// do for quantized weights.
//
// Which tensors are packed is a pure function of the tensor (StoredPacked):
// contiguous owners (not views) of a packable dtype and shape. Every other
// tensor placed in such a buffer (norm weights, biases, small matrices) is
// stored as it is. SetTensorData/GetTensorData/CopyTensor always speak the
// logical row-major layout: the buffer packs on the way in and unpacks on
// the way out, for any byte range.
//
// The memory is host memory, but the type says is_host() == false because
// its bytes are not the logical layout: nothing may read `data` of a packed
// tensor directly except the CPU kernels that understand panels (mul_mat as
// `a`, get_rows as the table). Other ops, and any view of a packed tensor,
// are refused by cpu_kernels::CheckSupported with an error naming the
// tensor; other devices get the logical bytes through GetTensor.
//
// Where to put what: matrices that mul_mat reads go here. A table that only
// get_rows reads (an untied token embedding) is better left in the device's
// default type: gathering one row from panels touches a cache line per
// element (16x the bytes of a row-major row for f32). Tied embeddings, read
// by both, belong here: the output product is what costs.
//
// Use:
//   BufferType* type = GetCpuDevice().weights_buffer_type();
//   auto buffers = AllocateWeights(weights_ctx, *type);  // Padding included.
//   SetTensorData(*w, host_values);                      // Packs.
#ifndef FERRY_BACKENDS_CPU_CPU_PACKED_BUFFER_H_
#define FERRY_BACKENDS_CPU_CPU_PACKED_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/host/packed_state.h"
#include "ferry/graph/tensor.h"

namespace ferry {

// Thread-safe.
class CpuPackedBufferType final : public BufferType {
 public:
  // `device` (may be null) is what device() returns; not owned.
  explicit CpuPackedBufferType(Device* device) : device_(device) {}

  absl::string_view name() const override { return "cpu_packed"; }
  size_t alignment() const override { return 64; }
  // The packed size (padding of the last panel included) for tensors that
  // StoredPacked accepts, the logical size for the others.
  size_t AllocSize(const Tensor& tensor) const override;
  bool is_host() const override { return false; }
  Device* device() const override { return device_; }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;

 private:
  Device* device_;
};

// Host memory holding tensors in the layout StoredPacked
// (backends/host/packed_state.h) says. Thread-compatible: concurrent
// transfers into disjoint tensors are safe.
class CpuPackedBuffer final : public PackedHostBuffer {
 public:
  ~CpuPackedBuffer() override;

  // Byte ranges are in the logical layout. A view of a packed tensor is
  // refused with UnimplementedError.
  absl::Status SetTensor(Tensor& tensor, const void* data, size_t offset,
                         size_t size) override;
  absl::Status GetTensor(const Tensor& tensor, void* data, size_t offset,
                         size_t size) override;
  absl::Status MemsetTensor(Tensor& tensor, uint8_t value, size_t offset,
                            size_t size) override;
  absl::Status Clear(uint8_t value) override;

 private:
  friend class CpuPackedBufferType;
  CpuPackedBuffer(BufferType* type, void* base, size_t size)
      : PackedHostBuffer(type, base, size) {}
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_CPU_CPU_PACKED_BUFFER_H_
