// On a machine whose driver is older than the runtime (here the fake, set
// to driver 12.8 under runtime 13.0) with a GPU required (--config=gpu sets
// FERRY_REQUIRE_GPU=1), a GPU test fails, naming both versions, instead of
// skipping.
#include "ferry/backends/cuda/testing/cuda_test_util.h"

#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"

namespace ferry::cuda_testing {
namespace {

void NeedsOneDevice() { FERRY_CUDA_TEST_NEEDS_DEVICES(1); }

TEST(CudaTestUtilTest, NoUsableDeviceFailsWhenAGpuIsRequired) {
  ASSERT_TRUE(GpuRequired());
  EXPECT_FATAL_FAILURE(NeedsOneDevice(),
                       "driver 12.8 (12080), runtime 13.0 (13000)");
  EXPECT_FATAL_FAILURE(NeedsOneDevice(), "FERRY_REQUIRE_GPU=1");
}

TEST(CudaTestUtilTest, VersionsNameTheDriverAndTheRuntime) {
  EXPECT_EQ(CudaVersions(), "driver 12.8 (12080), runtime 13.0 (13000)");
  const absl::Status status = CheckCudaDevices(1);
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_NE(status.message().find("cudaErrorInsufficientDriver"),
            absl::string_view::npos)
      << status;
}

}  // namespace
}  // namespace ferry::cuda_testing
