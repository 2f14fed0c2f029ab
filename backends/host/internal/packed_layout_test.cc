#include "ferry/backends/host/internal/packed_layout.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ferry/graph/dtype.h"
#include "gtest/gtest.h"

namespace ferry {
namespace cpu_internal {
namespace {

TEST(PackedLayoutTest, PackableShapes) {
  EXPECT_TRUE(PackedLayout::Packable(DType::kF32, {7, 64, 1, 1}));
  EXPECT_TRUE(PackedLayout::Packable(DType::kF16, {2048, 5632, 1, 1}));
  EXPECT_TRUE(PackedLayout::Packable(DType::kBF16, {1, 128, 2, 3}));
  // Unaligned row counts only from kMinUnalignedPackedRows on.
  EXPECT_TRUE(PackedLayout::Packable(DType::kF32, {16, 513, 1, 1}));
  EXPECT_FALSE(PackedLayout::Packable(DType::kF32, {16, 100, 1, 1}));
  EXPECT_FALSE(PackedLayout::Packable(DType::kF32, {16, 63, 1, 1}));
  EXPECT_FALSE(PackedLayout::Packable(DType::kF32, {2048, 1, 1, 1}));
  EXPECT_FALSE(PackedLayout::Packable(DType::kI32, {16, 64, 1, 1}));
  EXPECT_FALSE(PackedLayout::Packable(DType::kF32, {0, 64, 1, 1}));
}

TEST(PackedLayoutTest, SizesIncludeTheLastPanelsPadding) {
  const PackedLayout layout(DType::kF16, {10, 520, 2, 1});
  EXPECT_EQ(layout.panels(), 9);
  EXPECT_EQ(layout.SliceElements(), 9 * 64 * 10);
  EXPECT_EQ(layout.PackedBytes(), size_t{9 * 64 * 10 * 2 * 2});
  EXPECT_EQ(layout.LogicalBytes(), size_t{10 * 520 * 2 * 2});
}

TEST(PackedLayoutTest, PackedIndexFollowsTheDocumentedFormula) {
  const PackedLayout layout(DType::kF32, {5, 130, 2, 1});  // 3 panels.
  for (int64_t s = 0; s < 2; ++s) {
    for (int64_t m = 0; m < 130; ++m) {
      for (int64_t k = 0; k < 5; ++k) {
        const int64_t e = (s * 130 + m) * 5 + k;
        EXPECT_EQ(layout.PackedIndex(e),
                  s * 3 * 64 * 5 + (m / 64) * 64 * 5 + k * 64 + m % 64);
      }
    }
  }
}

// Packs `logical` in pieces [offsets[i], offsets[i+1]) (any byte
// boundaries), checks every element landed at PackedIndex, then unpacks in
// other pieces and expects the original bytes.
void CheckRoundTrip(DType dtype, std::array<int64_t, 4> ne,
                    const std::vector<size_t>& cuts) {
  const PackedLayout layout(dtype, ne);
  const int64_t es = layout.element_bytes();
  std::vector<uint8_t> logical(layout.LogicalBytes());
  std::mt19937 rng(7);
  for (uint8_t& b : logical) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> packed(layout.PackedBytes(), 0xEE);
  size_t begin = 0;
  for (size_t cut : cuts) {
    layout.Pack(logical.data() + begin, begin, cut - begin, packed.data());
    begin = cut;
  }
  layout.Pack(logical.data() + begin, begin, logical.size() - begin,
              packed.data());
  const int64_t elements = static_cast<int64_t>(logical.size()) / es;
  for (int64_t e = 0; e < elements; ++e) {
    ASSERT_EQ(
        std::memcmp(&packed[layout.PackedIndex(e) * es], &logical[e * es], es),
        0)
        << "element " << e;
  }
  std::vector<uint8_t> back(logical.size(), 0);
  // Unpack in the reverse pieces order, with one extra odd cut.
  std::vector<size_t> unpack_cuts = cuts;
  unpack_cuts.push_back(logical.size() / 2 + 1);
  std::sort(unpack_cuts.begin(), unpack_cuts.end());
  begin = 0;
  for (size_t cut : unpack_cuts) {
    layout.Unpack(packed.data(), begin, cut - begin, back.data() + begin);
    begin = cut;
  }
  layout.Unpack(packed.data(), begin, back.size() - begin, back.data() + begin);
  EXPECT_EQ(back, logical);
}

TEST(PackedLayoutTest, RoundTripsWholeTensors) {
  CheckRoundTrip(DType::kF32, {70, 128, 1, 1}, {});
  CheckRoundTrip(DType::kF16, {3, 576, 1, 1}, {});
  CheckRoundTrip(DType::kBF16, {65, 192, 2, 2}, {});
}

TEST(PackedLayoutTest, RoundTripsArbitraryByteRanges) {
  // Cuts inside elements, inside rows, across panels and across slices.
  CheckRoundTrip(DType::kF32, {70, 128, 2, 1},
                 {1, 3, 281, 4 * 70 * 63 + 2, 4 * 70 * 64, 4 * 70 * 129 + 5});
  CheckRoundTrip(DType::kF16, {9, 515, 1, 1}, {7, 2 * 9 * 511 + 1});
}

}  // namespace
}  // namespace cpu_internal
}  // namespace ferry
