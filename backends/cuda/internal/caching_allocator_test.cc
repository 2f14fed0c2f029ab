#include "ferry/backends/cuda/internal/caching_allocator.h"

#include <cstdlib>
#include <memory>
#include <set>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::cuda_internal {
namespace {

using ::ferry::testing::StatusIs;

// Host memory standing in for the device's, with a capacity.
class FakeDeviceMemory : public RawDeviceMemory {
 public:
  explicit FakeDeviceMemory(size_t capacity) : capacity_(capacity) {}
  ~FakeDeviceMemory() override { EXPECT_TRUE(live_.empty()); }

  absl::StatusOr<void*> Allocate(size_t size) override {
    if (used_ + size > capacity_) {
      return absl::ResourceExhaustedError("fake device out of memory");
    }
    void* ptr = std::malloc(size);
    used_ += size;
    live_.insert({ptr, size});
    ++mallocs;
    return ptr;
  }
  void Free(void* ptr) override {
    auto it = live_.find({ptr, 0});
    ASSERT_NE(it, live_.end());
    used_ -= it->second;
    live_.erase(it);
    std::free(ptr);
    ++frees;
  }

  int mallocs = 0;
  int frees = 0;

 private:
  struct ByPtr {
    bool operator()(const std::pair<void*, size_t>& a,
                    const std::pair<void*, size_t>& b) const {
      return a.first < b.first;
    }
  };
  size_t capacity_;
  size_t used_ = 0;
  std::set<std::pair<void*, size_t>, ByPtr> live_;
};

// A fence the test completes by hand. A `device_side` fence completes when
// waited for (the device finishes it); another (work held on the host)
// cannot be waited for.
class FakeFence : public Fence {
 public:
  bool IsComplete() override { return complete; }
  bool Wait() override {
    if (!device_side) return false;
    ++waits;
    complete = true;
    return true;
  }
  bool complete = false;
  bool device_side = false;
  int waits = 0;
};

constexpr uint64_t kStreamA = 1;
constexpr uint64_t kStreamB = 2;

TEST(CachingAllocatorTest, RoundsSizes) {
  EXPECT_EQ(CachingAllocator::RoundSize(1), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(513), 1024u);
  EXPECT_EQ(CachingAllocator::RoundSize(1 << 20), 2u << 20);
  EXPECT_EQ(CachingAllocator::RoundSize((2 << 20) + 1), 4u << 20);
}

TEST(CachingAllocatorTest, SameStreamReusesAtOnce) {
  FakeDeviceMemory memory(1 << 24);
  CachingAllocator allocator(&memory);
  FERRY_ASSERT_OK_AND_ASSIGN(auto a, allocator.Allocate(1000, kStreamA));
  auto own = std::make_shared<FakeFence>();
  allocator.Free(a, kStreamA, own, {});
  FERRY_ASSERT_OK_AND_ASSIGN(auto b, allocator.Allocate(900, kStreamA));
  EXPECT_EQ(b.ptr, a.ptr);
  EXPECT_EQ(memory.mallocs, 1);
  EXPECT_EQ(allocator.stats().hits, 1);
  allocator.Free(b, kStreamA, nullptr, {});
}

TEST(CachingAllocatorTest, OtherStreamWaitsForOwnersFence) {
  FakeDeviceMemory memory(1 << 24);
  CachingAllocator allocator(&memory);
  FERRY_ASSERT_OK_AND_ASSIGN(auto a, allocator.Allocate(4096, kStreamA));
  auto own = std::make_shared<FakeFence>();
  allocator.Free(a, kStreamA, own, {});
  // Stream B may not take it while A's work may still touch it.
  FERRY_ASSERT_OK_AND_ASSIGN(auto b, allocator.Allocate(4096, kStreamB));
  EXPECT_NE(b.ptr, a.ptr);
  own->complete = true;
  FERRY_ASSERT_OK_AND_ASSIGN(auto c, allocator.Allocate(4096, kStreamB));
  EXPECT_EQ(c.ptr, a.ptr);
  allocator.Free(b, kStreamB, nullptr, {});
  allocator.Free(c, kStreamB, nullptr, {});
}

TEST(CachingAllocatorTest, OtherStreamsFencesGuardEveryone) {
  FakeDeviceMemory memory(1 << 24);
  CachingAllocator allocator(&memory);
  FERRY_ASSERT_OK_AND_ASSIGN(auto a, allocator.Allocate(4096, kStreamA));
  auto other = std::make_shared<FakeFence>();  // B also used the block.
  allocator.Free(a, kStreamA, nullptr, {other});
  FERRY_ASSERT_OK_AND_ASSIGN(auto b, allocator.Allocate(4096, kStreamA));
  EXPECT_NE(b.ptr, a.ptr);  // Not even the owner: B may still read it.
  other->complete = true;
  FERRY_ASSERT_OK_AND_ASSIGN(auto c, allocator.Allocate(4096, kStreamA));
  EXPECT_EQ(c.ptr, a.ptr);
  allocator.Free(b, kStreamA, nullptr, {});
  allocator.Free(c, kStreamA, nullptr, {});
}

TEST(CachingAllocatorTest, UnownedBlocksWaitForTheirFences) {
  FakeDeviceMemory memory(1 << 24);
  CachingAllocator allocator(&memory);
  FERRY_ASSERT_OK_AND_ASSIGN(auto a, allocator.Allocate(4096, kNoStream));
  auto fence = std::make_shared<FakeFence>();
  allocator.Free(a, kNoStream, fence, {});
  FERRY_ASSERT_OK_AND_ASSIGN(auto b, allocator.Allocate(4096, kNoStream));
  EXPECT_NE(b.ptr, a.ptr);
  fence->complete = true;
  FERRY_ASSERT_OK_AND_ASSIGN(auto c, allocator.Allocate(4096, kStreamA));
  EXPECT_EQ(c.ptr, a.ptr);
  allocator.Free(b, kNoStream, nullptr, {});
  allocator.Free(c, kStreamA, nullptr, {});
}

TEST(CachingAllocatorTest, DoesNotHandOutBlocksMuchLargerThanAsked) {
  FakeDeviceMemory memory(1 << 26);
  CachingAllocator allocator(&memory);
  FERRY_ASSERT_OK_AND_ASSIGN(auto big, allocator.Allocate(8 << 20, kStreamA));
  allocator.Free(big, kStreamA, nullptr, {});
  FERRY_ASSERT_OK_AND_ASSIGN(auto small, allocator.Allocate(1024, kStreamA));
  EXPECT_NE(small.ptr, big.ptr);
  allocator.Free(small, kStreamA, nullptr, {});
}

TEST(CachingAllocatorTest, OutOfMemoryReleasesIdleBlocksAndRetries) {
  FakeDeviceMemory memory(8 << 20);
  CachingAllocator allocator(&memory);
  FERRY_ASSERT_OK_AND_ASSIGN(auto a, allocator.Allocate(6 << 20, kStreamA));
  allocator.Free(a, kStreamA, nullptr, {});
  // 6 MiB cached + 8 MiB wanted > 8 MiB: the idle block is released.
  FERRY_ASSERT_OK_AND_ASSIGN(auto b, allocator.Allocate(7 << 20, kStreamA));
  EXPECT_EQ(allocator.stats().oom_retries, 1);
  EXPECT_EQ(allocator.stats().releases, 1);
  allocator.Free(b, kStreamA, nullptr, {});
}

// Item 6 of issue #15: cached blocks whose fences are pending on the device
// are waited for and released before an allocation gives up (the old code
// released only idle blocks, so this allocation failed).
TEST(CachingAllocatorTest, OutOfMemoryWaitsForBlocksTheDeviceWillFree) {
  FakeDeviceMemory memory(8 << 20);
  CachingAllocator allocator(&memory);
  FERRY_ASSERT_OK_AND_ASSIGN(auto a, allocator.Allocate(6 << 20, kStreamA));
  auto pending = std::make_shared<FakeFence>();
  pending->device_side = true;
  allocator.Free(a, kStreamA, nullptr, {pending});
  FERRY_ASSERT_OK_AND_ASSIGN(auto b, allocator.Allocate(7 << 20, kStreamB));
  EXPECT_EQ(pending->waits, 1);
  EXPECT_EQ(memory.frees, 1);
  EXPECT_EQ(allocator.stats().cached_bytes, 0u);
  allocator.Free(b, kStreamB, nullptr, {});
}

// Giving memory back to the device (cudaFree synchronizes the whole
// device) must not hold the allocator's lock: other threads keep using the
// cache meanwhile. The old code freed under the lock.
TEST(CachingAllocatorTest, ReleasesMemoryOutsideItsLock) {
  class SlowFree : public RawDeviceMemory {
   public:
    absl::StatusOr<void*> Allocate(size_t size) override {
      return std::malloc(size);
    }
    void Free(void* ptr) override {
      std::free(ptr);
      // Like cudaFree waiting for the device: another thread asks the
      // allocator for its stats meanwhile.
      auto done = std::make_shared<absl::Notification>();
      std::thread other([this, done] {
        (void)allocator->stats();
        done->Notify();
      });
      other_finished = done->WaitForNotificationWithTimeout(absl::Seconds(5));
      if (other_finished) {
        other.join();
      } else {
        other.detach();  // Blocked on the lock our caller holds.
      }
    }
    CachingAllocator* allocator = nullptr;
    bool other_finished = false;
  };
  SlowFree memory;
  CachingAllocator allocator(&memory);
  memory.allocator = &allocator;
  FERRY_ASSERT_OK_AND_ASSIGN(auto a, allocator.Allocate(4096, kStreamA));
  allocator.Free(a, kStreamA, nullptr, {});
  EXPECT_EQ(allocator.ReleaseIdle(), 4096u);
  EXPECT_TRUE(memory.other_finished);
}

TEST(CachingAllocatorTest, OutOfMemoryWithBusyBlocksIsResourceExhausted) {
  FakeDeviceMemory memory(8 << 20);
  CachingAllocator allocator(&memory);
  FERRY_ASSERT_OK_AND_ASSIGN(auto a, allocator.Allocate(6 << 20, kStreamA));
  auto busy = std::make_shared<FakeFence>();  // Held on the host.
  allocator.Free(a, kStreamA, nullptr, {busy});
  EXPECT_THAT(allocator.Allocate(7 << 20, kStreamB).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(allocator.stats().cached_bytes, 6u << 20);
  busy->complete = true;
  EXPECT_EQ(allocator.ReleaseIdle(), 6u << 20);
  EXPECT_EQ(memory.frees, 1);
}

TEST(CachingAllocatorTest, RejectsZeroAndHugeSizes) {
  FakeDeviceMemory memory(1 << 20);
  CachingAllocator allocator(&memory);
  EXPECT_THAT(allocator.Allocate(0, kStreamA).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(allocator.Allocate(SIZE_MAX, kStreamA).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST(CachingAllocatorTest, StatsTrackBytes) {
  FakeDeviceMemory memory(1 << 24);
  CachingAllocator allocator(&memory);
  FERRY_ASSERT_OK_AND_ASSIGN(auto a, allocator.Allocate(1000, kStreamA));
  EXPECT_EQ(allocator.stats().allocated_bytes, 1024u);
  allocator.Free(a, kStreamA, nullptr, {});
  EXPECT_EQ(allocator.stats().allocated_bytes, 0u);
  EXPECT_EQ(allocator.stats().cached_bytes, 1024u);
  EXPECT_EQ(allocator.stats().peak_bytes, 1024u);
  EXPECT_EQ(allocator.stats().misses, 1);
}

}  // namespace
}  // namespace ferry::cuda_internal
