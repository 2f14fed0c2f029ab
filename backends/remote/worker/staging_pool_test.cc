#include "ferry/backends/remote/worker/staging_pool.h"

#include <memory>
#include <thread>
#include <vector>

#include "ferry/backends/host_buffer.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::remote {
namespace {

TEST(StagingPoolTest, AReleasedBufferIsReusedForTheSameSizeClass) {
  HostBufferType type("staging_test", 64, nullptr);
  StagingPool pool(size_t{64} << 20);
  FERRY_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Buffer> a,
                             pool.Acquire(type, 3 << 20));
  EXPECT_GE(a->size(), size_t{3} << 20);
  void* const base = a->base();
  a.reset();
  EXPECT_EQ(pool.kept_bytes(), size_t{4} << 20);
  // 3.5 MiB rounds to the same 4 MiB: the same memory, no new pages.
  FERRY_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Buffer> b,
                             pool.Acquire(type, (7 << 20) / 2));
  EXPECT_EQ(b->base(), base);
  EXPECT_EQ(pool.kept_bytes(), 0u);
  // Held buffers are never handed out twice.
  FERRY_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Buffer> c,
                             pool.Acquire(type, 3 << 20));
  EXPECT_NE(c->base(), b->base());
  // Another size class or type does not take it.
  b.reset();
  HostBufferType other("staging_test_other", 64, nullptr);
  FERRY_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Buffer> d,
                             pool.Acquire(other, 3 << 20));
  EXPECT_NE(d->base(), base);
  FERRY_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Buffer> e,
                             pool.Acquire(type, 1 << 20));
  EXPECT_NE(e->base(), base);
  EXPECT_EQ(pool.kept_bytes(), size_t{4} << 20);
}

TEST(StagingPoolTest, KeepsNoMoreThanItsLimitAndNothingLarge) {
  HostBufferType type("staging_test", 64, nullptr);
  StagingPool pool(size_t{8} << 20);
  std::vector<std::shared_ptr<Buffer>> held;
  for (int i = 0; i < 4; ++i) {
    FERRY_ASSERT_OK_AND_ASSIGN(held.emplace_back(),
                               pool.Acquire(type, 4 << 20));
  }
  held.clear();
  EXPECT_EQ(pool.kept_bytes(), size_t{8} << 20);
  // Above 16 MiB: the exact size, freed when released.
  FERRY_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Buffer> large,
                             pool.Acquire(type, (17 << 20) + 1));
  EXPECT_EQ(large->size(), (size_t{17} << 20) + 1);
  large.reset();
  EXPECT_EQ(pool.kept_bytes(), size_t{8} << 20);
}

TEST(StagingPoolTest, BuffersOutliveThePoolAndComeBackFromAnyThread) {
  HostBufferType type("staging_test", 64, nullptr);
  std::shared_ptr<Buffer> survivor;
  {
    StagingPool pool(size_t{64} << 20);
    FERRY_ASSERT_OK_AND_ASSIGN(survivor, pool.Acquire(type, 1 << 20));
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&pool, &type] {
        for (int i = 0; i < 100; ++i) {
          auto b = pool.Acquire(type, size_t{64} << 10);
          ASSERT_TRUE(b.ok());
          static_cast<char*>((*b)->base())[0] = 1;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_LE(pool.kept_bytes(), size_t{4} << 16);
  }
  static_cast<char*>(survivor->base())[0] = 2;  // Still valid (ASan).
  survivor.reset();
}

TEST(StagingPoolTest, RefusesPastItsInUseLimit) {
  HostBufferType type("staging_test", 64, nullptr);
  StagingPool pool(size_t{64} << 20, size_t{40} << 20);
  FERRY_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Buffer> a,
                             pool.Acquire(type, 3 << 20));
  FERRY_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Buffer> b,
                             pool.Acquire(type, 32 << 20));
  EXPECT_EQ(pool.in_use_bytes(), size_t{36} << 20);
  EXPECT_THAT(pool.Acquire(type, 8 << 20),
              ::ferry::testing::StatusIs(absl::StatusCode::kResourceExhausted));
  b.reset();
  EXPECT_EQ(pool.in_use_bytes(), size_t{4} << 20);
  FERRY_EXPECT_OK(pool.Acquire(type, 8 << 20).status());
  a.reset();
  EXPECT_EQ(pool.in_use_bytes(), 0u);
}

}  // namespace
}  // namespace ferry::remote
