#include "ferry/backends/cpu/internal/packed_layout.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ferry/graph/dtype.h"

namespace ferry {
namespace cpu_internal {
namespace {

// Columns moved per step of BlockCopy: rows x kBlockK elements on both sides
// stay in L1 while the transpose walks them.
constexpr int64_t kBlockK = 64;

// Moves `rows` whole rows (k elements of kBytes each) between row-major
// `logical` and the panel at `panel`, starting at lane `lane`, kBlockK
// columns at a time. memcpy of a fixed size compiles to one move and keeps
// the accesses free of alignment and aliasing assumptions.
template <int kBytes, bool kToPacked>
void BlockCopy(std::byte* logical, std::byte* panel, int64_t lane, int64_t rows,
               int64_t k) {
  for (int64_t k0 = 0; k0 < k; k0 += kBlockK) {
    const int64_t k1 = std::min(k, k0 + kBlockK);
    for (int64_t r = 0; r < rows; ++r) {
      std::byte* row = logical + r * k * kBytes;
      std::byte* column = panel + (lane + r) * kBytes;
      for (int64_t c = k0; c < k1; ++c) {
        std::byte* p = column + c * kPanelWidth * kBytes;
        if constexpr (kToPacked) {
          std::memcpy(p, row + c * kBytes, kBytes);
        } else {
          std::memcpy(row + c * kBytes, p, kBytes);
        }
      }
    }
  }
}

}  // namespace

PackedLayout::PackedLayout(DType dtype, const std::array<int64_t, 4>& ne)
    : k_(ne[0]),
      m_(ne[1]),
      slices_(ne[2] * ne[3]),
      element_bytes_(DTypeBlockBytes(dtype)) {}

bool PackedLayout::Packable(DType dtype, const std::array<int64_t, 4>& ne) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return false;
  }
  if (ne[0] < 1 || ne[2] < 1 || ne[3] < 1) return false;
  return ne[1] >= kPanelWidth &&
         (ne[1] % kPanelWidth == 0 || ne[1] >= kMinUnalignedPackedRows);
}

int64_t PackedLayout::PackedIndex(int64_t e) const {
  const int64_t row = e / k_;
  const int64_t col = e % k_;
  const int64_t slice = row / m_;
  const int64_t m = row % m_;
  return slice * SliceElements() + (m / kPanelWidth) * kPanelWidth * k_ +
         col * kPanelWidth + m % kPanelWidth;
}

template <bool kToPacked>
void PackedLayout::Transfer(const std::byte* logical, size_t offset,
                            size_t size, std::byte* packed) const {
  const int64_t es = element_bytes_;
  int64_t pos = static_cast<int64_t>(offset);
  const int64_t end = pos + static_cast<int64_t>(size);
  const std::byte* base = logical - offset;  // Logical byte i at base + i.
  auto move_bytes = [&](int64_t logical_pos, int64_t n) {
    std::byte* p =
        packed + PackedIndex(logical_pos / es) * es + logical_pos % es;
    std::byte* l = const_cast<std::byte*>(base) + logical_pos;
    if constexpr (kToPacked) {
      std::memcpy(p, l, static_cast<size_t>(n));
    } else {
      std::memcpy(l, p, static_cast<size_t>(n));
    }
  };
  // A partial first element.
  if (pos % es != 0 && pos < end) {
    const int64_t n = std::min(es - pos % es, end - pos);
    move_bytes(pos, n);
    pos += n;
  }
  while (end - pos >= es) {
    const int64_t e = pos / es;
    const int64_t row = e / k_;
    const int64_t col = e % k_;
    const int64_t whole_rows = (end - pos) / es / k_;
    if (col != 0 || whole_rows == 0) {
      // Element by element up to the row's end (or the range's).
      const int64_t n = std::min(k_ - col, (end - pos) / es);
      for (int64_t i = 0; i < n; ++i) move_bytes(pos + i * es, es);
      pos += n * es;
      continue;
    }
    // Whole rows, as many as stay in one panel.
    const int64_t m = row % m_;
    const int64_t lane = m % kPanelWidth;
    const int64_t rows = std::min({whole_rows, kPanelWidth - lane, m_ - m});
    std::byte* panel = packed + (PackedIndex(e) - lane) * es;
    std::byte* l = const_cast<std::byte*>(base) + pos;
    if (es == 4) {
      BlockCopy<4, kToPacked>(l, panel, lane, rows, k_);
    } else {
      BlockCopy<2, kToPacked>(l, panel, lane, rows, k_);
    }
    pos += rows * k_ * es;
  }
  // A partial last element.
  if (pos < end) move_bytes(pos, end - pos);
}

void PackedLayout::Pack(const void* src, size_t offset, size_t size,
                        void* packed) const {
  Transfer<true>(static_cast<const std::byte*>(src), offset, size,
                 static_cast<std::byte*>(packed));
}

void PackedLayout::Unpack(const void* packed, size_t offset, size_t size,
                          void* dst) const {
  Transfer<false>(static_cast<const std::byte*>(dst), offset, size,
                  static_cast<std::byte*>(const_cast<void*>(packed)));
}

}  // namespace cpu_internal
}  // namespace ferry
