#include "ferry/runtime/guarded_mapping.h"

#include <sys/mman.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace ferry {
namespace {

TEST(GuardedMappingTest, UnguardedIsOneWritableMappingOfWholePages) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto m = MapGuarded(page + 1, /*guarded=*/false, "test");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->device, m->alias);
  EXPECT_EQ(m->mapped, 2 * page);
  m->device[page] = 7;
  EXPECT_EQ(m->alias[page], 7);
  UnmapGuarded(*m);
}

TEST(GuardedMappingTest, GuardedAliasWritesTheDeviceBytes) {
  auto m = MapGuarded(0, /*guarded=*/true, "test");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_NE(m->device, m->alias);
  EXPECT_EQ(m->mapped, static_cast<size_t>(sysconf(_SC_PAGESIZE)));
  m->alias[5] = 42;
  // The device address is PROT_NONE; open it to see it is the same memory.
  ASSERT_EQ(mprotect(m->device, m->mapped, PROT_READ), 0);
  EXPECT_EQ(m->device[5], 42);
  UnmapGuarded(*m);
}

TEST(GuardedMappingDeathTest, GuardedDeviceAddressFaults) {
  auto m = MapGuarded(64, /*guarded=*/true, "test");
  ASSERT_TRUE(m.ok()) << m.status();
  volatile char* device = m->device;
  EXPECT_DEATH(device[0] = 1, "");
  UnmapGuarded(*m);
}

}  // namespace
}  // namespace ferry
