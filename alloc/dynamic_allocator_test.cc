#include "ferry/alloc/dynamic_allocator.h"

#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;

TEST(DynamicAllocatorTest, AlignsAndTracksHighWater) {
  DynamicAllocator dyn(64, 1 << 20);
  DynamicAddress a = *dyn.Allocate(10);
  DynamicAddress b = *dyn.Allocate(100);
  EXPECT_EQ(a, (DynamicAddress{0, 0}));
  EXPECT_EQ(b, (DynamicAddress{0, 64}));
  EXPECT_EQ(dyn.high_water(0), 64 + 128);
  EXPECT_EQ(dyn.allocated_bytes(), 192);
  dyn.Free(a, 10);
  dyn.Free(b, 100);
  EXPECT_EQ(dyn.allocated_bytes(), 0);
  EXPECT_EQ(dyn.total_high_water(), 192);
  // Everything merged back into one free block.
  ASSERT_EQ(dyn.free_blocks(0).size(), 1u);
  EXPECT_EQ(dyn.free_blocks(0)[0].offset, 0);
}

TEST(DynamicAllocatorTest, BestFitAndMergeOnFree) {
  DynamicAllocator dyn(16, 1 << 20);
  DynamicAddress a = *dyn.Allocate(64);
  DynamicAddress b = *dyn.Allocate(32);
  DynamicAddress c = *dyn.Allocate(16);
  DynamicAddress d = *dyn.Allocate(32);
  DynamicAddress e = *dyn.Allocate(16);
  (void)e;
  dyn.Free(a, 64);  // Hole of 64 at 0.
  dyn.Free(c, 16);  // Hole of 16 at 96.
  // 16 bytes go to the exact 16-byte hole, not the 64-byte one.
  EXPECT_EQ(*dyn.Allocate(16), c);
  dyn.Free(c, 16);
  // Freeing b merges [0,64) + [64,96) + [96,112) into one block.
  dyn.Free(b, 32);
  ASSERT_GE(dyn.free_blocks(0).size(), 1u);
  EXPECT_EQ(dyn.free_blocks(0)[0].offset, 0);
  EXPECT_EQ(dyn.free_blocks(0)[0].size, 112);
  // 112 bytes fit exactly into the merged hole, below the high-water mark.
  const int64_t hw = dyn.high_water(0);
  EXPECT_EQ(*dyn.Allocate(112), (DynamicAddress{0, 0}));
  EXPECT_EQ(dyn.high_water(0), hw);
  dyn.Free(d, 32);
}

TEST(DynamicAllocatorTest, SpillsIntoNewChunksAtMaxSize) {
  DynamicAllocator dyn(64, 256);
  EXPECT_EQ(*dyn.Allocate(200), (DynamicAddress{0, 0}));
  EXPECT_EQ(*dyn.Allocate(128), (DynamicAddress{1, 0}));
  EXPECT_EQ(*dyn.Allocate(64), (DynamicAddress{1, 128}));
  EXPECT_EQ(*dyn.Allocate(64), (DynamicAddress{1, 192}));
  EXPECT_EQ(dyn.num_chunks(), 2);
  EXPECT_EQ(dyn.high_water(0), 256);
  EXPECT_EQ(dyn.high_water(1), 256);
  EXPECT_EQ(dyn.total_high_water(), 512);
}

TEST(DynamicAllocatorTest, Errors) {
  DynamicAllocator dyn(64, 256, /*max_chunks=*/1);
  EXPECT_THAT(dyn.Allocate(257).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(dyn.Allocate(256).status(), IsOk());
  EXPECT_THAT(dyn.Allocate(1).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  dyn.Reset();
  EXPECT_EQ(dyn.num_chunks(), 0);
  EXPECT_THAT(dyn.Allocate(1).status(), IsOk());
}

}  // namespace
}  // namespace ferry
