#include "ferry/backends/cuda/cuda_probe.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

// Runs everywhere: with a GPU it counts devices, without one it must answer
// Unavailable with CUDA's reason instead of crashing.
TEST(CudaProbeTest, ReportsDevicesOrWhyNot) {
  absl::StatusOr<int> count = CudaDeviceCount();
  if (count.ok()) {
    EXPECT_GT(*count, 0);
  } else {
    EXPECT_EQ(count.status().code(), absl::StatusCode::kUnavailable)
        << count.status();
    EXPECT_NE(count.status().message().find("cudaGetDeviceCount"),
              absl::string_view::npos);
  }
  // The answer is cached: asking again gives the same result.
  EXPECT_EQ(CudaDeviceCount().status(), count.status());
}

}  // namespace
}  // namespace ferry
