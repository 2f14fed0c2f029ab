// The block emulation runs the row kernels' reductions with several warps
// per block and several blocks, as a GPU does: results match a double-
// precision reference, every thread of a block gets the same result, in
// place works, and threads that skip a barrier are reported. Under TSan it
// checks the reduction's barriers (a missing one is a data race on the
// block's shared memory or the shuffle slots).
#include "ferry/backends/cuda/kernels/testing/block_emulation.h"

#include <cmath>
#include <vector>

#include "absl/random/random.h"
#include "ferry/backends/cuda/kernels/testing/block_reduce_test_kernels.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::cuda_kernels_testing {
namespace {

using ::ferry::testing::StatusIs;

std::vector<float> Random(size_t n, uint64_t seed) {
  absl::BitGen gen{std::seed_seq{seed}};
  std::vector<float> out(n);
  for (float& v : out) v = absl::Uniform<float>(gen, -3.0f, 3.0f);
  return out;
}

TEST(BlockEmulationTest, ReductionsAcrossWarpsAndBlocks) {
  for (int threads : {32, 64, 256}) {
    constexpr int64_t kBlocks = 3;
    const std::vector<float> values = Random(kBlocks * threads, threads);
    std::vector<float> sums, maxes;
    FERRY_ASSERT_OK(ReduceOnBlocks(kBlocks, threads, values, &sums, &maxes));
    for (int64_t b = 0; b < kBlocks; ++b) {
      double sum = 0;
      float max = -INFINITY;
      for (int t = 0; t < threads; ++t) {
        sum += values[b * threads + t];
        max = std::max(max, values[b * threads + t]);
      }
      EXPECT_NEAR(sums[b], sum, 1e-4) << threads << " threads, block " << b;
      EXPECT_EQ(maxes[b], max) << threads << " threads, block " << b;
    }
  }
}

// rms_norm and norm rows wider than a warp, with fewer blocks than rows
// (each block loops over rows), in place and not.
TEST(BlockEmulationTest, NormRowsMatchAReference) {
  constexpr int64_t kRows = 7;
  for (int64_t n : {int64_t{33}, int64_t{300}, int64_t{1000}}) {
    const std::vector<float> x = Random(static_cast<size_t>(kRows * n), n);
    for (bool center : {false, true}) {
      for (bool in_place : {false, true}) {
        std::vector<float> out;
        FERRY_ASSERT_OK(NormRows(x, n, center, 1e-5f, /*blocks=*/3,
                                 /*threads=*/128, in_place, &out));
        for (int64_t r = 0; r < kRows; ++r) {
          double mean = 0, sq = 0;
          for (int64_t c = 0; c < n; ++c) mean += x[r * n + c];
          mean = center ? mean / n : 0.0;
          for (int64_t c = 0; c < n; ++c) {
            sq += (x[r * n + c] - mean) * (x[r * n + c] - mean);
          }
          const double inv = 1.0 / std::sqrt(sq / n + 1e-5);
          for (int64_t c = 0; c < n; ++c) {
            ASSERT_NEAR(out[r * n + c], (x[r * n + c] - mean) * inv, 1e-4)
                << "n=" << n << " center=" << center << " row " << r;
          }
        }
      }
    }
  }
}

TEST(BlockEmulationTest, SoftMaxRowsMatchAReference) {
  constexpr int64_t kRows = 5;
  for (int64_t n : {int64_t{40}, int64_t{257}}) {
    std::vector<float> x = Random(static_cast<size_t>(kRows * n), 7 * n);
    x[n + 3] = -INFINITY;  // A masked entry.
    for (bool in_place : {false, true}) {
      std::vector<float> out;
      FERRY_ASSERT_OK(SoftMaxRows(x, n, 0.5f, /*blocks=*/2, /*threads=*/256,
                                  in_place, &out));
      for (int64_t r = 0; r < kRows; ++r) {
        double max = -INFINITY, sum = 0;
        for (int64_t c = 0; c < n; ++c)
          max = std::max<double>(max, 0.5 * x[r * n + c]);
        for (int64_t c = 0; c < n; ++c)
          sum += std::exp(0.5 * x[r * n + c] - max);
        for (int64_t c = 0; c < n; ++c) {
          ASSERT_NEAR(out[r * n + c], std::exp(0.5 * x[r * n + c] - max) / sum,
                      1e-6)
              << "n=" << n << " row " << r;
        }
      }
    }
  }
}

TEST(BlockEmulationTest, DivergenceAtABarrierIsReported) {
  SetBarrierTimeoutForTesting(absl::Milliseconds(300));
  EXPECT_THAT(DivergentBlock(64), StatusIs(absl::StatusCode::kInternal));
  SetBarrierTimeoutForTesting(absl::Seconds(30));
  // The emulation works again afterwards.
  std::vector<float> sums, maxes;
  FERRY_EXPECT_OK(
      ReduceOnBlocks(1, 64, std::vector<float>(64, 1.0f), &sums, &maxes));
  EXPECT_EQ(sums[0], 64.0f);
}

TEST(BlockEmulationTest, RejectsShapesAGpuWouldNot) {
  EXPECT_THAT(RunBlocks(1, 48, [](const auto&, HostSync&, float*) {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RunBlocks(1, 2048, [](const auto&, HostSync&, float*) {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace ferry::cuda_kernels_testing
