// Tensor: the metadata of one node or leaf of a ferry graph.
//
// Shapes follow ggml: up to 4 dimensions, ne[0] is the innermost one, ne[i]
// counts elements and nb[i] is the byte stride of dimension i. A contiguous
// tensor has nb[0] = element size and nb[i] = nb[i-1] * ne[i-1]; views,
// permutes and transposes change nb without moving data. Unused dimensions
// have ne[i] = 1.
//
// Tensors are created by a Context (context.h) and wired together by the
// functions of ops.h; their memory is placed later by an allocator, which sets
// `buffer` and `data`. graph/ depends on no backend: Buffer is only declared.
#ifndef FERRY_GRAPH_TENSOR_H_
#define FERRY_GRAPH_TENSOR_H_

#include <array>
#include <bit>
#include <cstdint>
#include <string>

#include "ferry/graph/dtype.h"
#include "ferry/graph/op.h"

namespace ferry {

class Buffer;  // Defined by backends; graph/ never looks inside.

inline constexpr int kMaxDims = 4;
inline constexpr int kMaxSrc = 4;
inline constexpr int kMaxOpParams = 16;

// Bits of Tensor::flags.
enum TensorFlag : uint32_t {
  kTensorFlagInput = 1u << 0,   // Set by the user before each compute.
  kTensorFlagOutput = 1u << 1,  // Read after compute: never overwritten.
  kTensorFlagWeight = 1u << 2,  // Parameters: long-lived, placed once.
  // Placed by a graph allocator, which places it again on every allocation:
  // its buffer may since have been freed, so only allocators read it.
  // PlaceTensor/PlaceView (an owner's placement) clear it.
  kTensorFlagAllocated = 1u << 3,
};

// One tensor's metadata. A plain struct like ggml_tensor so kernels read
// fields directly; the Context that created it owns it and keeps its address
// stable. Non-owning pointers: `src`, `view_src`, `buffer` and `data` point at
// objects owned elsewhere that must outlive their use through this tensor.
// Thread-compatible.
struct Tensor {
  DType dtype = DType::kF32;
  std::array<int64_t, kMaxDims> ne = {1, 1, 1, 1};  // Elements per dim.
  std::array<int64_t, kMaxDims> nb = {0, 0, 0, 0};  // Byte stride per dim.

  Op op = Op::kNone;
  // Op parameters: 16 x 32-bit words, each an int32 or a float (see ops.h for
  // each op's layout). Read and write them with the accessors below.
  std::array<int32_t, kMaxOpParams> op_params = {};
  // Sources, unused ones null. Sources are filled from index 0 with no gaps,
  // except that an optional source (soft_max's mask) may be null.
  std::array<Tensor*, kMaxSrc> src = {};

  // For tensors that alias another's memory (view ops, cpy): the tensor
  // owning that memory (never itself a view) and the byte offset into it.
  // When allocated, data == (char*)view_src->data + view_offset.
  Tensor* view_src = nullptr;
  int64_t view_offset = 0;

  uint32_t flags = 0;  // TensorFlag bits.

  // Where the data lives; both null until an allocator (or
  // Context::AllocateHostData) places the tensor. `data` is a host pointer
  // for host buffers and an opaque device address otherwise.
  Buffer* buffer = nullptr;
  void* data = nullptr;

  std::string name;

  // Scratch for Graph::Build's traversal (an epoch mark). Not for other use.
  uint64_t visit_mark = 0;
  // Scratch for one graph algorithm at a time (the scheduler numbers a
  // graph's tensors here to index its side tables). Not for other use.
  int32_t scratch_index = -1;

  // Op parameter accessors; `i` must be in [0, kMaxOpParams).
  int32_t ParamI32(int i) const { return op_params[i]; }
  float ParamF32(int i) const { return std::bit_cast<float>(op_params[i]); }
  void SetParamI32(int i, int32_t value) { op_params[i] = value; }
  void SetParamF32(int i, float value) {
    op_params[i] = std::bit_cast<int32_t>(value);
  }

  bool HasFlag(TensorFlag flag) const { return (flags & flag) != 0; }

  // Returns the number of sources in use (index of the last non-null + 1).
  int NumSrc() const;

  // Returns the bytes of one element (for block types, of one block).
  int64_t ElementSize() const { return DTypeBlockBytes(dtype); }
  int64_t NumElements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t NumRows() const { return ne[1] * ne[2] * ne[3]; }
  // Returns the byte span the tensor covers: from its first byte to the end
  // of its last element (= NumElements() * ElementSize() when contiguous).
  // Zero when any dimension is empty.
  int64_t NumBytes() const;
  // Returns the bytes of one row of ne[0] elements, packed.
  int64_t RowBytes() const {
    return ne[0] / DTypeBlockSize(dtype) * ElementSize();
  }

  // True when the elements are packed in order (dimensions of size 1 may
  // have any stride).
  bool IsContiguous() const;
  // True when nb[0] == ElementSize(): each row's elements are adjacent.
  bool HasContiguousRows() const { return nb[0] == ElementSize(); }
  // True when strides are not increasing (a permute changed dim order).
  bool IsPermuted() const;
  // True when dims 0 and 1 are swapped (nb[0] > nb[1]).
  bool IsTransposed() const { return nb[0] > nb[1]; }
  bool IsView() const { return view_src != nullptr; }

  // Returns e.g. "[4096, 32, 1, 1] f32".
  std::string ShapeString() const;
  // Returns name, op, shape and strides, for logs and test failures.
  std::string DebugString() const;
};

// True when `t` has memory its owner placed (not a graph allocator), which
// allocators and schedulers must leave where it is.
inline bool HasPresetMemory(const Tensor& t) {
  return t.data != nullptr && (t.flags & kTensorFlagAllocated) == 0;
}

// The flags that describe the tensor, without allocator bookkeeping.
inline uint32_t DescriptiveFlags(const Tensor& t) {
  return t.flags & ~static_cast<uint32_t>(kTensorFlagAllocated);
}

// Returns the contiguous strides for `ne` in `dtype`.
std::array<int64_t, kMaxDims> ContiguousStrides(
    DType dtype, const std::array<int64_t, kMaxDims>& ne);

// True when a and b have equal ne (dtype and strides may differ).
bool SameShape(const Tensor& a, const Tensor& b);

// True when `small` can be broadcast (repeated) onto `big`: every
// big.ne[i] is a multiple of small.ne[i]. Element (i0, i1, i2, i3) of `big`
// pairs with (i0 % small.ne[0], ..., i3 % small.ne[3]) of `small`.
bool CanRepeat(const Tensor& small, const Tensor& big);

}  // namespace ferry

#endif  // FERRY_GRAPH_TENSOR_H_
