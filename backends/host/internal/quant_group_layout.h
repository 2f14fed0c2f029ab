// The layout in which the CPU backend stores q4_0, q4_1, q5_0, q5_1, q8_0,
// q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl and iq4_xs weight matrices
// (CpuPackedBuffer), so that quantized mul_mat reads 8 rows at a time as its
// tiles want them (quant_tile.h) without laying them out on every call, as
// ggml's CPU "repack" buffers do for q4_0.
//
// A matrix of M rows (a multiple of kGroupRows) of K elements (whole
// blocks) is cut into groups of kGroupRows consecutive rows. A group stores
// its rows block by block. A block is f16 fields (header), then bytes in
// pieces of 4, then f16 fields again (trailer; only q2_K, q3_K and q6_K have
// one: q2_K's d and dmin, the others' d). For block b the group holds each
// field of the 8 rows side by side (16 bytes: the header's in order, then
// the trailer's), then the pieces, each with the 8 rows' side by side (32
// bytes). q4_0, q5_0, q8_0, iq4_nl: header d; q4_1, q5_1, q4_K and q5_K:
// header d and m (dmin); iq4_xs: d and scales_h, then scales_l as a piece
// and its nibbles; q5 has its fifth bits (qh) as piece 0 and then 4 pieces
// of nibbles as q4 has; q8 has 8 pieces; q4_K's pieces are its 12 bytes of
// scales (3 pieces) and its 128 of nibbles (q5_K: with its 32 of qh, 8
// pieces, between them); q6_K's are its ql (32), qh (16) and int8 scales
// (4), with trailer d; q3_K's its hmask (8), qs (16) and packed scales (3),
// with trailer d; q2_K's its scale | minimum bytes (4) and qs (16), with
// trailer d, dmin. The same bytes as the row-major matrix, in another
// order, so the same size. Higher dimensions are more rows: a slice holds
// whole groups.
#ifndef FERRY_BACKENDS_HOST_INTERNAL_QUANT_GROUP_LAYOUT_H_
#define FERRY_BACKENDS_HOST_INTERNAL_QUANT_GROUP_LAYOUT_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "ferry/graph/dtype.h"

namespace ferry {
namespace cpu_internal {

// Rows per group.
inline constexpr int64_t kGroupRows = 8;

// Thread-compatible value type.
class QuantGroupLayout {
 public:
  // True for q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K,
  // iq4_nl and iq4_xs matrices whose row count (ne[1]) is a multiple of
  // kGroupRows and whose rows are whole blocks.
  static bool Packable(DType dtype, const std::array<int64_t, 4>& ne);

  // The layout of a contiguous tensor that Packable accepts.
  QuantGroupLayout(DType dtype, const std::array<int64_t, 4>& ne);

  int64_t row_bytes() const { return row_bytes_; }
  int64_t block_bytes() const { return block_bytes_; }
  // Bytes of one block of the group (kGroupRows blocks).
  int64_t group_block_bytes() const { return block_bytes_ * kGroupRows; }
  // Bytes of a block's f16 fields before and after its pieces.
  int64_t header_bytes() const { return header_bytes_; }
  int64_t trailer_bytes() const { return trailer_bytes_; }
  int64_t rows() const { return rows_; }
  // Bytes of one group: kGroupRows rows.
  int64_t group_bytes() const { return row_bytes_ * kGroupRows; }
  size_t bytes() const { return static_cast<size_t>(row_bytes_ * rows_); }

  // Where logical (row-major) byte `offset` lives in the packed bytes.
  size_t PackedOffset(size_t offset) const;

  // Copies logical bytes [offset, offset + size) from `src` (which holds
  // those bytes) into their places in `packed`; any byte range works.
  void Pack(const void* src, size_t offset, size_t size, void* packed) const;
  // Copies logical bytes [offset, offset + size) from `packed` into `dst`.
  void Unpack(const void* packed, size_t offset, size_t size, void* dst) const;

 private:
  template <bool kToPacked>
  void Transfer(std::byte* logical, size_t offset, size_t size,
                std::byte* packed) const;

  int64_t block_bytes_;
  int64_t header_bytes_;   // f16 fields before a block's pieces: 0, 2 or 4.
  int64_t trailer_bytes_;  // f16 fields after them: 0, 2 or 4.
  int64_t row_bytes_;
  int64_t rows_;
};

}  // namespace cpu_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_INTERNAL_QUANT_GROUP_LAYOUT_H_
