#include "ferry/backends/host/internal/quant_group_layout.h"

#include <cstring>

namespace ferry {
namespace cpu_internal {
namespace {

constexpr int64_t kPieceBytes = 4;

// f16 fields before a block's pieces.
int64_t HeaderBytes(DType dtype) {
  switch (dtype) {
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kIQ4_XS:  // d, scales_h.
      return 4;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ6_K:
      return 0;
    default:
      return 2;
  }
}

// f16 fields after them.
int64_t TrailerBytes(DType dtype) {
  switch (dtype) {
    case DType::kQ2_K:  // d, dmin.
      return 4;
    case DType::kQ3_K:
    case DType::kQ6_K:
      return 2;
    default:
      return 0;
  }
}

}  // namespace

bool QuantGroupLayout::Packable(DType dtype, const std::array<int64_t, 4>& ne) {
  return (dtype == DType::kQ4_0 || dtype == DType::kQ4_1 ||
          dtype == DType::kQ5_0 || dtype == DType::kQ5_1 ||
          dtype == DType::kQ8_0 || dtype == DType::kQ2_K ||
          dtype == DType::kQ4_K || dtype == DType::kQ3_K ||
          dtype == DType::kQ5_K || dtype == DType::kQ6_K ||
          dtype == DType::kIQ4_NL || dtype == DType::kIQ4_XS) &&
         ne[0] > 0 && ne[0] % DTypeBlockSize(dtype) == 0 && ne[1] > 0 &&
         ne[1] % kGroupRows == 0 && ne[2] > 0 && ne[3] > 0;
}

QuantGroupLayout::QuantGroupLayout(DType dtype,
                                   const std::array<int64_t, 4>& ne)
    : block_bytes_(DTypeBlockBytes(dtype)),
      header_bytes_(HeaderBytes(dtype)),
      trailer_bytes_(TrailerBytes(dtype)),
      row_bytes_(ne[0] / DTypeBlockSize(dtype) * block_bytes_),
      rows_(ne[1] * ne[2] * ne[3]) {}

size_t QuantGroupLayout::PackedOffset(size_t offset) const {
  const auto at = static_cast<int64_t>(offset);
  const int64_t row = at / row_bytes_;
  const int64_t r = row % kGroupRows;
  const int64_t in_row = at % row_bytes_;
  const int64_t o = in_row % block_bytes_;
  const int64_t base = (row - r) * row_bytes_ +
                       in_row / block_bytes_ * block_bytes_ * kGroupRows;
  const int64_t trailer_at = block_bytes_ - trailer_bytes_;
  if (o < header_bytes_ || o >= trailer_at) {
    // Field f (header ones first), byte o % 2 of row r's.
    const int64_t f =
        o < header_bytes_ ? o / 2 : (header_bytes_ + o - trailer_at) / 2;
    return static_cast<size_t>(base + f * 2 * kGroupRows + r * 2 + o % 2);
  }
  const int64_t v = o - header_bytes_;
  return static_cast<size_t>(base +
                             (header_bytes_ + trailer_bytes_) * kGroupRows +
                             v / kPieceBytes * kPieceBytes * kGroupRows +
                             r * kPieceBytes + v % kPieceBytes);
}

template <bool kToPacked>
void QuantGroupLayout::Transfer(std::byte* logical, size_t offset, size_t size,
                                std::byte* packed) const {
  const auto move = [&](size_t from, size_t to, size_t bytes) {
    if constexpr (kToPacked) {
      std::memcpy(packed + to, logical + (from - offset), bytes);
    } else {
      std::memcpy(logical + (from - offset), packed + to, bytes);
    }
  };
  const auto block = static_cast<size_t>(block_bytes_);
  const auto header = static_cast<size_t>(header_bytes_);
  const auto fields = static_cast<size_t>(header_bytes_ + trailer_bytes_);
  const size_t pieces_end = block - static_cast<size_t>(trailer_bytes_);
  const size_t end = offset + size;
  size_t at = offset;
  while (at < end) {
    if (at % block == 0 && at + block <= end) {
      // A whole block: its f16 fields and its pieces, each contiguous, at
      // fixed distances from where the group's block `start`s.
      const auto row_bytes = static_cast<size_t>(row_bytes_);
      const size_t row = at / row_bytes;
      const size_t r = row % kGroupRows;
      const size_t start =
          (row - r) * row_bytes + at % row_bytes / block * block * kGroupRows;
      for (size_t f = 0; f < fields; f += 2) {
        const size_t from = f < header ? f : pieces_end + (f - header);
        move(at + from, start + f * kGroupRows + 2 * r, 2);
      }
      const size_t values = start + fields * kGroupRows + kPieceBytes * r;
      for (size_t v = 0; header + v * kPieceBytes < pieces_end; ++v) {
        move(at + header + v * kPieceBytes,
             values + v * kPieceBytes * kGroupRows, kPieceBytes);
      }
      at += block;
    } else {
      move(at, PackedOffset(at), 1);
      ++at;
    }
  }
}

void QuantGroupLayout::Pack(const void* src, size_t offset, size_t size,
                            void* packed) const {
  Transfer<true>(const_cast<std::byte*>(static_cast<const std::byte*>(src)),
                 offset, size, static_cast<std::byte*>(packed));
}

void QuantGroupLayout::Unpack(const void* packed, size_t offset, size_t size,
                              void* dst) const {
  Transfer<false>(
      static_cast<std::byte*>(dst), offset, size,
      const_cast<std::byte*>(static_cast<const std::byte*>(packed)));
}

}  // namespace cpu_internal
}  // namespace ferry
