// The kernels' index math at the sizes a GPU's grid reaches: FastDiv
// against `/` for every kind of divisor and for numerators up to 2^32 - 1,
// ElementIndex on both of its paths, and the grid-stride loops at the grid
// limits the launchers use (65536 element blocks, 2^20 row blocks) with
// element counts beyond 2^32.
#include "ferry/backends/cuda/kernels/internal/index_math.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "absl/random/random.h"
#include "gtest/gtest.h"

namespace ferry::cuda_kernels_internal {
namespace {

void ExpectDivides(uint32_t divisor, uint32_t n) {
  const FastDiv d = MakeFastDiv(divisor);
  ASSERT_EQ(Div(n, d), n / divisor) << n << " / " << divisor;
}

TEST(IndexMathTest, FastDivIsExactAcrossTheRange) {
  constexpr uint32_t kMax = std::numeric_limits<uint32_t>::max();
  std::vector<uint32_t> divisors = {1,
                                    2,
                                    3,
                                    7,
                                    32,
                                    255,
                                    256,
                                    641,
                                    65535,
                                    65536,
                                    65537,
                                    (1u << 20) + 7,
                                    (1u << 31) - 1,
                                    1u << 31,
                                    (1u << 31) + 1,
                                    kMax - 1,
                                    kMax};
  absl::BitGen gen;
  for (int i = 0; i < 200; ++i) {
    divisors.push_back(absl::Uniform<uint32_t>(gen, 1, kMax));
  }
  for (uint32_t divisor : divisors) {
    // Around multiples of the divisor, the top of the range, and at random.
    for (uint32_t n : {0u, 1u, divisor - 1, divisor, divisor + 1, kMax,
                       kMax - 1, kMax - divisor, kMax / divisor * divisor,
                       kMax / divisor * divisor - 1}) {
      ExpectDivides(divisor, n);
    }
    for (int j = 0; j < 2000; ++j) {
      ExpectDivides(divisor, absl::Uniform<uint32_t>(gen));
    }
  }
  // Every numerator for a few small divisors.
  for (uint32_t divisor : {3u, 10u, 1000u}) {
    const FastDiv d = MakeFastDiv(divisor);
    for (uint32_t n = 0; n < (1u << 22); ++n) ASSERT_EQ(Div(n, d), n / divisor);
  }
}

void ExpectUnflattens(const int64_t (&ne)[4], int64_t e) {
  const ElementIndex index = MakeElementIndex(ne);
  int64_t got[4];
  Unflatten(e, index, got);
  int64_t want[4];
  int64_t rest = e;
  for (int i = 0; i < 3; ++i) {
    want[i] = rest % ne[i];
    rest /= ne[i];
  }
  want[3] = rest;
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(got[i], want[i]) << "e=" << e << " dim " << i;
  }
}

TEST(IndexMathTest, ElementIndexOnBothPaths) {
  // Just under 2^32 elements: the FastDiv path, up to its last element.
  const int64_t fast_shape[4] = {4095, 1021, 1027, 1};
  EXPECT_TRUE(MakeElementIndex(fast_shape).fast);
  const int64_t fast_count = 4095LL * 1021 * 1027;
  for (int64_t e : {int64_t{0}, int64_t{4094}, int64_t{4095},
                    fast_count / 2 + 17, fast_count - 1}) {
    ExpectUnflattens(fast_shape, e);
  }
  // 2^32 elements and more: 64-bit division.
  const int64_t wide_shape[4] = {65536, 65536, 3, 2};
  EXPECT_FALSE(MakeElementIndex(wide_shape).fast);
  const int64_t wide_count = 65536LL * 65536 * 3 * 2;
  for (int64_t e : {int64_t{0}, int64_t{1} << 32, (int64_t{1} << 32) + 65537,
                    wide_count - 1}) {
    ExpectUnflattens(wide_shape, e);
  }
  absl::BitGen gen;
  const int64_t shapes[][4] = {{7, 5, 3, 2},
                               {1, 1, 1, 1},
                               {256, 1, 33, 4},
                               {65535, 3, 7, 5},
                               {1, 4096, 1, 1000}};
  for (const auto& shape : shapes) {
    const int64_t count = shape[0] * shape[1] * shape[2] * shape[3];
    for (int i = 0; i < 1000; ++i) {
      ExpectUnflattens(shape, absl::Uniform<int64_t>(gen, 0, count));
    }
  }
}

TEST(IndexMathTest, ModMatchesPercent) {
  for (uint32_t n : {1u, 3u, 64u, 1000u, 65537u}) {
    const FastDiv d = MakeFastDiv(n);
    for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{n} - 1, int64_t{n},
                      int64_t{n} * 3 + 2, int64_t{0xfffffffe}}) {
      EXPECT_EQ(Mod(i, d, n, /*fast=*/true), i % n);
      EXPECT_EQ(Mod(i, d, n, /*fast=*/false), i % n);
    }
  }
}

// Every element of a launch at the grid limit is visited exactly once, by
// the thread the grid-stride loop assigns it to.
TEST(IndexMathTest, ElementLoopCoversLargeGridsExactlyOnce) {
  const int64_t count = kMaxElementBlocks * kElementThreads + 12345;
  const int64_t blocks = ElementBlocks(count);
  ASSERT_EQ(blocks, kMaxElementBlocks);  // The grid limit: loops twice.
  std::vector<uint8_t> seen(static_cast<size_t>(count), 0);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t t = 0; t < kElementThreads; ++t) {
      ForEachElement(GridPosition{b, blocks, t, kElementThreads}, count,
                     [&](int64_t e) { ++seen[static_cast<size_t>(e)]; });
    }
  }
  for (int64_t e = 0; e < count; ++e) {
    ASSERT_EQ(seen[static_cast<size_t>(e)], 1) << e;
  }
}

// Past 2^32 elements the indices stay exact (64-bit): each thread visits
// every element congruent to its offset, up to the last one below count.
TEST(IndexMathTest, ElementLoopIndicesBeyond32Bits) {
  const int64_t count = (int64_t{1} << 33) + 7;
  const int64_t blocks = ElementBlocks(count);
  const int64_t stride = blocks * kElementThreads;
  for (int64_t t : {int64_t{0}, int64_t{6}, int64_t{kElementThreads - 1}}) {
    for (int64_t b : {int64_t{0}, blocks - 1}) {
      const int64_t offset = b * kElementThreads + t;
      int64_t next = offset;
      ForEachElement(GridPosition{b, blocks, t, kElementThreads}, count,
                     [&](int64_t e) {
                       ASSERT_EQ(e, next);
                       next += stride;
                     });
      // The loop stopped at the first index past the end.
      EXPECT_GE(next, count) << "block " << b << " thread " << t;
      EXPECT_LT(next - stride, count) << "block " << b << " thread " << t;
    }
  }
}

TEST(IndexMathTest, RowLoopAtTheRowGridLimit) {
  const int64_t rows = 3 * kMaxRowBlocks + 5;
  const int64_t blocks = RowBlocks(rows);
  ASSERT_EQ(blocks, kMaxRowBlocks);
  std::vector<uint8_t> seen(static_cast<size_t>(rows), 0);
  for (int64_t b = 0; b < blocks; ++b) {
    ForEachRow(GridPosition{b, blocks, 0, 32}, rows,
               [&](int64_t row) { ++seen[static_cast<size_t>(row)]; });
  }
  for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(seen[static_cast<size_t>(r)], 1);
  EXPECT_EQ(RowThreads(1), 32);
  EXPECT_EQ(RowThreads(33), 64);
  EXPECT_EQ(RowThreads(100000), kMaxRowThreads);
}

}  // namespace
}  // namespace ferry::cuda_kernels_internal
