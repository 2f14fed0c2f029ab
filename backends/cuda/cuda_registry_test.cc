// Runs everywhere: the registry's CUDA devices agree with the driver. On a
// machine without a GPU or driver there are none, and creating one is
// Unavailable with CUDA's reason.
#include <string>

#include "absl/strings/match.h"
#include "ferry/backends/cuda/cuda_device.h"
#include "ferry/backends/cuda/cuda_probe.h"
#include "ferry/backends/registry.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::StatusIs;

int RegisteredCudaDevices() {
  int n = 0;
  for (Device* device : Registry::Global().devices()) {
    if (absl::StartsWith(device->name(), "cuda")) ++n;
  }
  return n;
}

TEST(CudaRegistryTest, RegisteredDevicesMatchTheDriver) {
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) {
    EXPECT_THAT(count.status(), StatusIs(absl::StatusCode::kUnavailable));
    EXPECT_EQ(RegisteredCudaDevices(), 0);
    EXPECT_THAT(CudaDevice::Create(0).status(),
                StatusIs(absl::StatusCode::kUnavailable));
    EXPECT_THAT(RegisterCudaDevices(Registry::Global()).status(),
                StatusIs(absl::StatusCode::kUnavailable));
    return;
  }
  EXPECT_EQ(RegisteredCudaDevices(), *count);
  EXPECT_THAT(CudaDevice::Create(*count).status(),
              StatusIs(absl::StatusCode::kUnavailable));
  // Registering again adds nothing.
  absl::StatusOr<int> again = RegisterCudaDevices(Registry::Global());
  ASSERT_THAT(again, ::ferry::testing::IsOk());
  EXPECT_EQ(*again, 0);
}

}  // namespace
}  // namespace ferry
