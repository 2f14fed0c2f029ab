#include "ferry/backends/host/internal/quant_group_layout.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "ferry/graph/dtype.h"
#include "ferry/quant/block_formats.h"
#include "gtest/gtest.h"

namespace ferry {
namespace cpu_internal {
namespace {

constexpr DType kTypes[] = {DType::kQ4_0, DType::kQ4_1,   DType::kQ5_0,
                            DType::kQ5_1, DType::kQ8_0,   DType::kQ2_K,
                            DType::kQ3_K, DType::kQ4_K,   DType::kQ5_K,
                            DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS};

// Three blocks' worth of elements (the tests' row length).
int64_t ThreeBlocks(DType dtype) { return 3 * DTypeBlockSize(dtype); }

TEST(QuantGroupLayoutTest, PackableOnlyWholeGroupsOfBlockTypes) {
  EXPECT_TRUE(QuantGroupLayout::Packable(DType::kQ4_0, {64, 16, 1, 1}));
  EXPECT_TRUE(QuantGroupLayout::Packable(DType::kQ4_1, {576, 1536, 2, 1}));
  EXPECT_FALSE(QuantGroupLayout::Packable(DType::kQ4_1, {64, 12, 1, 1}));
  EXPECT_TRUE(QuantGroupLayout::Packable(DType::kQ8_0, {64, 16, 1, 1}));
  EXPECT_TRUE(QuantGroupLayout::Packable(DType::kQ5_0, {64, 16, 1, 1}));
  EXPECT_TRUE(QuantGroupLayout::Packable(DType::kQ5_1, {576, 1536, 1, 1}));
  EXPECT_FALSE(QuantGroupLayout::Packable(DType::kQ5_1, {64, 20, 1, 1}));
  EXPECT_TRUE(QuantGroupLayout::Packable(DType::kQ4_K, {256, 16, 1, 1}));
  EXPECT_TRUE(QuantGroupLayout::Packable(DType::kQ6_K, {1536, 576, 1, 1}));
  EXPECT_FALSE(QuantGroupLayout::Packable(DType::kQ6_K, {128, 16, 1, 1}));
  EXPECT_FALSE(QuantGroupLayout::Packable(DType::kQ4_K, {256, 12, 1, 1}));
  EXPECT_TRUE(QuantGroupLayout::Packable(DType::kQ2_K, {1536, 576, 1, 1}));
  EXPECT_FALSE(QuantGroupLayout::Packable(DType::kQ2_K, {576, 16, 1, 1}));
  EXPECT_TRUE(QuantGroupLayout::Packable(DType::kIQ4_NL, {576, 16, 1, 1}));
  EXPECT_TRUE(QuantGroupLayout::Packable(DType::kIQ4_XS, {1536, 16, 1, 1}));
  EXPECT_FALSE(QuantGroupLayout::Packable(DType::kF32, {64, 16, 1, 1}));
  EXPECT_FALSE(QuantGroupLayout::Packable(DType::kF16, {256, 16, 1, 1}));
  EXPECT_FALSE(QuantGroupLayout::Packable(DType::kQ4_0, {48, 16, 1, 1}));
}

// Every logical byte has its own packed byte, and the fields land where
// the header says: row r's first field at 2r of its block group, its
// values' piece q at 8 * (header + trailer) + 32q + 4r (for q5, piece 0 is
// its qh), the trailing fields (q3_K's and q6_K's d, q2_K's d and dmin)
// after the header's (they have none).
TEST(QuantGroupLayoutTest, OffsetsAreAPermutationInTheDocumentedPlaces) {
  for (DType dtype : kTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const QuantGroupLayout layout(dtype, {ThreeBlocks(dtype), 16, 2, 1});
    std::set<size_t> seen;
    for (size_t i = 0; i < layout.bytes(); ++i) {
      const size_t p = layout.PackedOffset(i);
      ASSERT_LT(p, layout.bytes());
      EXPECT_TRUE(seen.insert(p).second) << "byte " << i;
    }
    const int64_t block = DTypeBlockBytes(dtype);
    const int64_t header = dtype == DType::kQ4_1 || dtype == DType::kQ5_1 ||
                                   dtype == DType::kQ4_K ||
                                   dtype == DType::kQ5_K ||
                                   dtype == DType::kIQ4_XS
                               ? 4
                           : dtype == DType::kQ6_K || dtype == DType::kQ3_K ||
                                   dtype == DType::kQ2_K
                               ? 0
                               : 2;
    const int64_t trailer = dtype == DType::kQ2_K ? 4
                            : dtype == DType::kQ6_K || dtype == DType::kQ3_K
                                ? 2
                                : 0;
    EXPECT_EQ(layout.header_bytes(), header);
    EXPECT_EQ(layout.trailer_bytes(), trailer);
    // Row 11 (group 1, r = 3), block 2: its first field, its values' byte
    // 5 and its last byte.
    const int64_t row = 11, b = 2, r = 3;
    const int64_t base = 8 * layout.row_bytes() + b * block * 8;
    const int64_t at = row * layout.row_bytes() + b * block;
    if (header > 0) {
      EXPECT_EQ(layout.PackedOffset(at), base + 2 * r);
    }
    EXPECT_EQ(layout.PackedOffset(at + header + 5),
              base + (header + trailer) * 8 + 1 * 32 + 4 * r + 1);
    // The last byte: byte 1 of the last field, or of the last piece.
    EXPECT_EQ(layout.PackedOffset(at + block - 1),
              trailer > 0 ? base + (header + trailer - 2) * 8 + 2 * r + 1
                          : base + 8 * block - 32 + 4 * r + 3);
    if (trailer > 0) {
      // The first trailing field follows the header's.
      EXPECT_EQ(layout.PackedOffset(at + block - trailer),
                base + header * 8 + 2 * r);
    }
  }
}

// Packing any byte ranges and unpacking others gives the bytes back.
TEST(QuantGroupLayoutTest, AnyRangesRoundTrip) {
  std::mt19937 rng(3);
  for (DType dtype : kTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const QuantGroupLayout layout(
        dtype, {ThreeBlocks(dtype) + DTypeBlockSize(dtype) * 2, 24, 1, 1});
    std::vector<uint8_t> logical(layout.bytes());
    std::iota(logical.begin(), logical.end(), 0);
    std::vector<uint8_t> packed(layout.bytes(), 0xEE);
    // In uneven pieces, none aligned to a block.
    for (size_t at = 0; at < logical.size();) {
      const size_t n = std::min<size_t>(1 + rng() % 97, logical.size() - at);
      layout.Pack(logical.data() + at, at, n, packed.data());
      at += n;
    }
    EXPECT_NE(packed, logical);
    std::vector<uint8_t> back(layout.bytes(), 0);
    for (size_t at = 0; at < back.size();) {
      const size_t n = std::min<size_t>(1 + rng() % 61, back.size() - at);
      layout.Unpack(packed.data(), at, n, back.data() + at);
      at += n;
    }
    EXPECT_EQ(back, logical);
  }
}

}  // namespace
}  // namespace cpu_internal
}  // namespace ferry
