#include "ferry/backends/linked/linked_devices.h"

#include "ferry/backends/registry.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;

TEST(LinkedDevicesTest, RegistersCpuAndSimAndIsIdempotent) {
  Registry registry;
  EXPECT_THAT(RegisterLinkedDevices(registry), IsOk());
  EXPECT_THAT(RegisterLinkedDevices(registry), IsOk());
  EXPECT_THAT(registry.FindDevice("cpu"), IsOk());
  EXPECT_TRUE(registry.HasFamily("sim"));
  // Families make nothing until asked.
  EXPECT_EQ(registry.devices().size(), 1u);
  FERRY_ASSERT_OK_AND_ASSIGN(BackendList list,
                             registry.CreateBackends("sim0,sim1,cpu"));
  ASSERT_EQ(list.backends.size(), 3u);
  EXPECT_EQ(list.backends[0]->name(), "sim0");
  EXPECT_EQ(list.backends[2]->name(), "cpu");
}

TEST(LinkedDevicesTest, GlobalRegistryIsEmptyUntilAProgramRegisters) {
  // Nothing registers itself at static init.
  EXPECT_TRUE(Registry::Global().devices().empty());
  EXPECT_FALSE(Registry::Global().HasFamily("sim"));
}

}  // namespace
}  // namespace ferry
