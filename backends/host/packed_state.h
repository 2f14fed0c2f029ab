// How the host kernels see a tensor's memory: row-major, or packed in the
// GEMM's panels (internal/packed_layout.h) by a buffer that packs weights
// when they are set. The kernels ask GetPackedState; a buffer that packs
// derives from PackedHostBuffer (backends/cpu's CpuPackedBuffer does), so
// the kernels need not know which backend owns it.
#ifndef FERRY_BACKENDS_HOST_PACKED_STATE_H_
#define FERRY_BACKENDS_HOST_PACKED_STATE_H_

#include "ferry/backends/buffer.h"
#include "ferry/graph/tensor.h"

namespace ferry {

// Host memory holding the tensors StoredPacked accepts in panel order
// (float types) or in groups of rows (q4_0, q4_1, q5_0, q5_1, q8_0:
// quant_group_layout.h) and every other tensor row-major.
// Thread-compatible, as Buffer.
class PackedHostBuffer : public Buffer {
 protected:
  using Buffer::Buffer;
};

// True when `tensor`, placed in a PackedHostBuffer, is stored packed: it is
// not a view, it is contiguous, and PackedLayout::Packable or
// QuantGroupLayout::Packable accepts its dtype and shape.
bool StoredPacked(const Tensor& tensor);

// How the host kernels must see a tensor's memory.
enum class PackedState {
  kPlain,         // Row-major at `data` (any buffer).
  kPacked,        // Panels or groups at `data` (the layout of its dtype).
  kViewOfPacked,  // A view into a packed tensor: no kernel can read it.
};

// Returns how `tensor` is stored. Looks at a buffer only when the tensor (or
// its view source) has memory its owner placed, since a graph allocator's
// placement may point at a freed buffer (see HasPresetMemory).
PackedState GetPackedState(const Tensor& tensor);

}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_PACKED_STATE_H_
