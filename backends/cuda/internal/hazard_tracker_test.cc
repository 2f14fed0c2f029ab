#include "ferry/backends/cuda/internal/hazard_tracker.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ferry::cuda_internal {
namespace {

constexpr int kCompute = 0;
constexpr int kH2D = 1;
constexpr int kD2H = 2;

const void* At(uintptr_t address) {
  return reinterpret_cast<const void*>(address);
}

MemoryAccess Access(std::vector<std::pair<uintptr_t, size_t>> reads,
                    std::vector<std::pair<uintptr_t, size_t>> writes) {
  MemoryAccess access;
  for (auto [a, n] : reads) access.AddRead(At(a), n);
  for (auto [a, n] : writes) access.AddWrite(At(a), n);
  access.Finish();
  return access;
}

TEST(MemoryAccessTest, ConflictsNeedAWrite) {
  const MemoryAccess read_a = Access({{100, 10}}, {});
  const MemoryAccess read_a2 = Access({{105, 10}}, {});
  const MemoryAccess write_a = Access({}, {{108, 4}});
  const MemoryAccess write_b = Access({}, {{200, 4}});
  EXPECT_FALSE(read_a.ConflictsWith(read_a2));
  EXPECT_TRUE(read_a.ConflictsWith(write_a));
  EXPECT_TRUE(write_a.ConflictsWith(read_a));
  EXPECT_TRUE(write_a.ConflictsWith(write_a));
  EXPECT_FALSE(write_b.ConflictsWith(read_a));
}

TEST(MemoryAccessTest, AdjacentRangesDoNotConflict) {
  const MemoryAccess slot0 = Access({}, {{1000, 256}});
  const MemoryAccess slot1 = Access({}, {{1256, 256}});
  EXPECT_FALSE(slot0.ConflictsWith(slot1));
  // Adjacent ranges in one access stay apart too (merging them would make
  // a write to the gap between others conflict falsely later on).
  const MemoryAccess adjacent = Access({{0, 1000}, {1000, 256}}, {});
  EXPECT_EQ(adjacent.reads().size(), 2u);
  const MemoryAccess overlapping = Access({{0, 1000}, {999, 256}}, {});
  EXPECT_EQ(overlapping.reads().size(), 1u);
  EXPECT_TRUE(slot0.ConflictsWith(adjacent));
  EXPECT_FALSE(slot1.ConflictsWith(Access({{0, 1000}, {1512, 8}}, {})));
}

TEST(MemoryAccessTest, ManyRangesAreSearched) {
  std::vector<std::pair<uintptr_t, size_t>> reads;
  for (uintptr_t i = 0; i < 1000; ++i) reads.push_back({i * 100, 50});
  const MemoryAccess many = Access(reads, {});
  EXPECT_FALSE(many.ConflictsWith(Access({}, {{50050, 50}})));
  EXPECT_TRUE(many.ConflictsWith(Access({}, {{50049, 2}})));
  EXPECT_TRUE(many.ConflictsWith(Access({}, {{99940, 100}})));
  EXPECT_FALSE(many.ConflictsWith(Access({}, {{100000, 100}})));
}

// The scheduler's pipelining: batch k+1's upload into another slot runs
// beside batch k's kernels; the kernels of batch k+1 wait for it.
TEST(HazardTrackerTest, UploadIntoAFreeSlotOverlapsCompute) {
  HazardTracker tracker(3, 16);
  // Batch 0: upload slot 0, compute reads slot 0, writes activations.
  EXPECT_TRUE(
      tracker.Add(kH2D, Access({{1, 64}}, {{1000, 64}}), false).empty());
  EXPECT_EQ(tracker.Add(kCompute, Access({{1000, 64}}, {{5000, 512}}), true),
            std::vector<int>{kH2D});
  // Batch 1: upload into slot 1 needs no wait.
  EXPECT_TRUE(
      tracker.Add(kH2D, Access({{1, 64}}, {{1064, 64}}), false).empty());
  // Download of batch 0's result waits for the kernels.
  EXPECT_EQ(tracker.Add(kD2H, Access({{5000, 512}}, {{20000, 512}}), false),
            std::vector<int>{kCompute});
  // Upload into slot 0 again (batch 2) conflicts with batch 0's kernels.
  EXPECT_EQ(tracker.Add(kH2D, Access({{1, 64}}, {{1000, 64}}), false),
            std::vector<int>{kCompute});
}

TEST(HazardTrackerTest, WaitAllWaitsForEveryStreamWithNewWork) {
  HazardTracker tracker(3, 16);
  tracker.Add(kH2D, Access({}, {{0, 8}}), false);
  tracker.Add(kD2H, Access({{100, 8}}, {}), false);
  EXPECT_EQ(tracker.Add(kCompute, Access({}, {}), true),
            (std::vector<int>{kH2D, kD2H}));
  // Nothing new since: no waits.
  EXPECT_TRUE(tracker.Add(kCompute, Access({}, {}), true).empty());
}

TEST(HazardTrackerTest, WaitsAreTransitive) {
  HazardTracker tracker(3, 16);
  tracker.Add(kH2D, Access({}, {{0, 8}}), false);
  // Compute waits for the upload.
  EXPECT_EQ(tracker.Add(kCompute, Access({{0, 8}}, {{100, 8}}), true),
            std::vector<int>{kH2D});
  // A download of what the upload wrote, after waiting for compute, is
  // already ordered after the upload.
  EXPECT_EQ(tracker.Add(kD2H, Access({{0, 8}, {100, 8}}, {{900, 16}}), false),
            std::vector<int>{kCompute});
}

TEST(HazardTrackerTest, WriteAfterReadOnHostMemory) {
  HazardTracker tracker(3, 16);
  // Download into host memory, then an upload from the same host memory.
  tracker.Add(kD2H, Access({{100, 8}}, {{7000, 8}}), false);
  EXPECT_EQ(tracker.Add(kH2D, Access({{7000, 8}}, {{300, 8}}), false),
            std::vector<int>{kD2H});
}

TEST(HazardTrackerTest, PendingIsBounded) {
  HazardTracker tracker(3, 4);
  for (int i = 0; i < 100; ++i) {
    tracker.Add(kCompute, Access({}, {{static_cast<uintptr_t>(i) * 16, 8}}),
                false);
  }
  EXPECT_LE(tracker.pending(kCompute), 4u);
  // An upload that conflicts with nothing kept still waits: it is too far
  // behind to check.
  EXPECT_EQ(tracker.Add(kH2D, Access({}, {{1 << 20, 8}}), false),
            std::vector<int>{kCompute});
}

TEST(HazardTrackerTest, ClearForgetsCompletedWork) {
  HazardTracker tracker(3, 16);
  tracker.Add(kCompute, Access({}, {{0, 8}}), false);
  tracker.Clear();
  EXPECT_EQ(tracker.pending(kCompute), 0u);
  EXPECT_TRUE(tracker.Add(kH2D, Access({}, {{0, 8}}), false).empty());
}

// Random operations on three streams: whenever two operations conflict, the
// later one is ordered after the earlier one (directly or transitively).
TEST(HazardTrackerTest, RandomOperationsKeepEveryConflictOrdered) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    HazardTracker tracker(3, 1 + trial % 8);
    struct Op {
      int stream;
      MemoryAccess access;
    };
    std::vector<Op> ops;
    // after[i][j]: op i is ordered after op j.
    std::vector<std::vector<bool>> after;
    std::vector<int> last_on(3, -1);
    for (int i = 0; i < 200; ++i) {
      const int stream = static_cast<int>(rng() % 3);
      std::vector<std::pair<uintptr_t, size_t>> reads, writes;
      for (int k = 0; k < 2; ++k) {
        const uintptr_t at = rng() % 64 * 8;
        (rng() % 2 ? reads : writes).push_back({at, 8 + rng() % 16});
      }
      MemoryAccess access = Access(reads, writes);
      const bool wait_all = stream == kCompute && rng() % 2;
      std::vector<int> waits = tracker.Add(stream, access, wait_all);
      std::vector<bool> row(i, false);
      auto inherit = [&](int j) {
        if (j < 0) return;
        row[j] = true;
        for (int m = 0; m < j; ++m) row[m] = row[m] || after[j][m];
      };
      inherit(last_on[stream]);
      for (int t : waits) inherit(last_on[t]);
      after.push_back(row);
      ops.push_back(Op{stream, access});
      last_on[stream] = i;
      for (int j = 0; j < i; ++j) {
        if (ops[i].access.ConflictsWith(ops[j].access)) {
          ASSERT_TRUE(after[i][j])
              << "trial " << trial << ": op " << i << " (stream " << stream
              << ") not ordered after conflicting op " << j << " (stream "
              << ops[j].stream << ")";
        }
      }
    }
  }
}

}  // namespace
}  // namespace ferry::cuda_internal
