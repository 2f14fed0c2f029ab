// The registry's CUDA devices agree with the driver. Runs everywhere: on a
// machine without a GPU or driver there are none, and making one is
// Unavailable with CUDA's reason (cuda_registry_test, real runtime); on the
// fake runtime (cuda_registry_test_on_fake) there are its devices.
#include <string>

#include "absl/strings/match.h"
#include "ferry/backends/cuda/cuda_device.h"
#include "ferry/backends/cuda/cuda_probe.h"
#include "ferry/backends/registry.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;

int RegisteredCudaDevices(const Registry& registry) {
  int n = 0;
  for (Device* device : registry.devices()) {
    if (absl::StartsWith(device->name(), "cuda")) ++n;
  }
  return n;
}

TEST(CudaRegistryTest, RegisteredDevicesMatchTheDriver) {
  Registry registry;
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) {
    EXPECT_THAT(count.status(), StatusIs(absl::StatusCode::kUnavailable));
    EXPECT_THAT(CudaDevice::Create(0).status(),
                StatusIs(absl::StatusCode::kUnavailable));
    EXPECT_THAT(RegisterCudaDevices(registry).status(),
                StatusIs(absl::StatusCode::kUnavailable));
    EXPECT_EQ(RegisteredCudaDevices(registry), 0);
    return;
  }
  absl::StatusOr<int> registered = RegisterCudaDevices(registry);
  ASSERT_THAT(registered, IsOk());
  EXPECT_EQ(*registered, *count);
  EXPECT_EQ(RegisteredCudaDevices(registry), *count);
  EXPECT_THAT(CudaDevice::Create(*count).status(),
              StatusIs(absl::StatusCode::kUnavailable));
  // Registering again adds nothing.
  absl::StatusOr<int> again = RegisterCudaDevices(registry);
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(*again, 0);
}

// The family makes cudaN when a device list names it, and says why not
// when it cannot.
TEST(CudaRegistryTest, FamilyMakesDevicesOnDemand) {
  Registry registry;
  FERRY_ASSERT_OK(RegisterCudaFamily(registry));
  FERRY_EXPECT_OK(RegisterCudaFamily(registry));  // Once is enough.
  EXPECT_EQ(RegisteredCudaDevices(registry), 0);
  absl::StatusOr<int> count = CudaDeviceCount();
  absl::StatusOr<BackendList> made = registry.CreateBackends("cuda0");
  if (!count.ok()) {
    EXPECT_FALSE(made.ok());
    EXPECT_EQ(RegisteredCudaDevices(registry), 0);
    return;
  }
  ASSERT_THAT(made, IsOk());
  EXPECT_EQ(made->backends[0]->name(), "cuda0");
  EXPECT_THAT(registry.CreateBackends(absl::StrCat("cuda", *count)).status(),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace ferry
