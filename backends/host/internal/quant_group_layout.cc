#include "ferry/backends/host/internal/quant_group_layout.h"

#include <cstring>

namespace ferry {
namespace cpu_internal {
namespace {

constexpr int64_t kBlockElements = 32;
constexpr int64_t kPieceBytes = 4;

}  // namespace

bool QuantGroupLayout::Packable(DType dtype, const std::array<int64_t, 4>& ne) {
  return (dtype == DType::kQ4_0 || dtype == DType::kQ4_1 ||
          dtype == DType::kQ5_0 || dtype == DType::kQ5_1 ||
          dtype == DType::kQ8_0) &&
         ne[0] > 0 && ne[0] % kBlockElements == 0 && ne[1] > 0 &&
         ne[1] % kGroupRows == 0 && ne[2] > 0 && ne[3] > 0;
}

QuantGroupLayout::QuantGroupLayout(DType dtype,
                                   const std::array<int64_t, 4>& ne)
    : block_bytes_(DTypeBlockBytes(dtype)),
      header_bytes_(dtype == DType::kQ4_1 || dtype == DType::kQ5_1 ? 4 : 2),
      row_bytes_(ne[0] / kBlockElements * block_bytes_),
      rows_(ne[1] * ne[2] * ne[3]) {}

size_t QuantGroupLayout::PackedOffset(size_t offset) const {
  const auto at = static_cast<int64_t>(offset);
  const int64_t row = at / row_bytes_;
  const int64_t r = row % kGroupRows;
  const int64_t in_row = at % row_bytes_;
  const int64_t o = in_row % block_bytes_;
  const int64_t base = (row - r) * row_bytes_ +
                       in_row / block_bytes_ * block_bytes_ * kGroupRows;
  if (o < header_bytes_) {
    // Field o / 2 (d or m), byte o % 2 of row r's.
    return static_cast<size_t>(base + o / 2 * 2 * kGroupRows + r * 2 + o % 2);
  }
  const int64_t v = o - header_bytes_;
  return static_cast<size_t>(base + header_bytes_ * kGroupRows +
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
  const size_t end = offset + size;
  size_t at = offset;
  while (at < end) {
    if (at % block == 0 && at + block <= end) {
      // A whole block: its f16 fields and its pieces, each contiguous, at
      // fixed distances from where its first byte goes.
      const auto r = at / static_cast<size_t>(row_bytes_) % kGroupRows;
      const size_t start = PackedOffset(at) - 2 * r;
      for (int64_t f = 0; f < header_bytes_; f += 2) {
        move(at + f, start + f / 2 * 2 * kGroupRows + 2 * r, 2);
      }
      const size_t values =
          start + header_bytes_ * kGroupRows + kPieceBytes * r;
      for (size_t v = 0; v * kPieceBytes + header_bytes_ < block; ++v) {
        move(at + header_bytes_ + v * kPieceBytes,
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
