// The panel layout in which the CPU backend stores weight matrices, so that
// mul_mat reads them as its GEMM wants them without re-packing on every call.
//
// A matrix of M rows of K elements (a tensor [K, M], ggml's mul_mat `a`) is
// cut into panels of kPanelWidth consecutive rows; each panel is stored
// k-major: for k = 0..K-1, its kPanelWidth elements of column k, the rows of
// the panel side by side. The last panel is padded to kPanelWidth rows (the
// padding is never read into a result). Higher dimensions (ne[2], ne[3]) are
// slices of such panels, one after the other. Element types stay as they
// are (f32, f16, bf16): the microkernels convert while loading, so f16 and
// bf16 weights keep their memory size.
//
// Element (k, m) of slice s lives at element index
//   s * SliceElements() + (m / W) * W * K + k * W + (m % W),  W = kPanelWidth.
#ifndef FERRY_BACKENDS_HOST_INTERNAL_PACKED_LAYOUT_H_
#define FERRY_BACKENDS_HOST_INTERNAL_PACKED_LAYOUT_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "ferry/graph/dtype.h"

namespace ferry {
namespace cpu_internal {

// Rows per panel: one AVX-512 tile's width (4 x 16 lanes); the AVX2 kernel
// reads each panel as four 16-wide strips.
inline constexpr int64_t kPanelWidth = 64;

// Smallest row count that is packed although it is not a multiple of
// kPanelWidth: from here on the last panel's padding costs at most 1/8.
inline constexpr int64_t kMinUnalignedPackedRows = 512;

// Shape of a packed tensor. Thread-compatible value type.
class PackedLayout {
 public:
  // The layout for a contiguous tensor of `dtype` and shape `ne`.
  PackedLayout(DType dtype, const std::array<int64_t, 4>& ne);

  // True when a tensor of this dtype and shape is stored packed: f32, f16 or
  // bf16, K >= 1, and M a multiple of kPanelWidth or >= kMinUnalignedPackedRows
  // (so padding stays small). Others are stored as they are.
  static bool Packable(DType dtype, const std::array<int64_t, 4>& ne);

  int64_t k() const { return k_; }
  int64_t m() const { return m_; }
  int64_t slices() const { return slices_; }
  int64_t element_bytes() const { return element_bytes_; }
  int64_t panels() const { return (m_ + kPanelWidth - 1) / kPanelWidth; }
  // Elements of one slice, padding included.
  int64_t SliceElements() const { return panels() * kPanelWidth * k_; }
  // Bytes the packed tensor occupies, padding included.
  size_t PackedBytes() const {
    return static_cast<size_t>(SliceElements() * slices_ * element_bytes_);
  }
  // Bytes of the logical (row-major) tensor.
  size_t LogicalBytes() const {
    return static_cast<size_t>(k_ * m_ * slices_ * element_bytes_);
  }
  // Packed element index of logical element index `e` (row-major order).
  int64_t PackedIndex(int64_t e) const;

  // Copies logical bytes [offset, offset + size) of the tensor from `src`
  // (which holds those bytes) into their places in `packed`. Any byte range
  // of the logical tensor works, partial elements included.
  void Pack(const void* src, size_t offset, size_t size, void* packed) const;
  // Copies logical bytes [offset, offset + size) from `packed` into `dst`.
  void Unpack(const void* packed, size_t offset, size_t size, void* dst) const;

 private:
  template <bool kToPacked>
  void Transfer(const std::byte* logical, size_t offset, size_t size,
                std::byte* packed) const;

  int64_t k_;
  int64_t m_;
  int64_t slices_;
  int64_t element_bytes_;
};

}  // namespace cpu_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_INTERNAL_PACKED_LAYOUT_H_
