#include "ferry/sched/copy_slots.h"

#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "ferry/alloc/testing/failing_buffer_type.h"
#include "ferry/backends/host_buffer.h"
#include "ferry/graph/context.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::FailingBufferType;
using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

class CopySlotsTest : public ::testing::Test {
 protected:
  Tensor* Source(int64_t n) { return *ctx_.NewTensor(DType::kF32, {n}, "src"); }
  static absl::Status NoSync() { return absl::OkStatus(); }

  Context ctx_;
};

TEST_F(CopySlotsTest, EverySlotOfEveryCopyHasItsOwnAlignedMemory) {
  HostBufferType type("dev", 256, nullptr);
  HostBufferType pinned("pinned", 64, nullptr);
  CopySlots slots(3);
  std::vector<CopySlots::Spec> specs = {
      {Source(10), &type, nullptr, "dev"},
      {Source(100), &type, &pinned, "dev"},
  };
  FERRY_ASSERT_OK(slots.Place(specs, NoSync));
  std::set<void*> seen;
  for (int i = 0; i < 2; ++i) {
    for (int c = 0; c < 3; ++c) {
      Tensor* copy = slots.copy(i, c);
      ASSERT_NE(copy->data, nullptr);
      EXPECT_EQ(copy->ne, specs[i].source->ne);
      EXPECT_TRUE(copy->HasFlag(kTensorFlagInput));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(copy->data) % 256, 0u);
      EXPECT_TRUE(seen.insert(copy->data).second) << "shared memory";
    }
  }
  // Staging only for the spec that asked for it, per slot.
  EXPECT_EQ(slots.staging(0, 0), nullptr);
  EXPECT_NE(slots.staging(1, 0), nullptr);
  EXPECT_NE(slots.staging(1, 0), slots.staging(1, 2));
  EXPECT_EQ(slots.copy_bytes(&type), 3 * 256u + 3 * 512u);
}

TEST_F(CopySlotsTest, BuffersAreChunkedAtTheTypesMaxSize) {
  // 1 KiB per copy, max 2 KiB per buffer: 2 copies x 3 slots -> 3 chunks.
  FailingBufferType type(64, 2048, /*fail_after=*/100);
  CopySlots slots(3);
  std::vector<CopySlots::Spec> specs = {{Source(256), &type, nullptr, "dev"},
                                        {Source(256), &type, nullptr, "dev"}};
  FERRY_ASSERT_OK(slots.Place(specs, NoSync));
  EXPECT_EQ(type.made(), 3);
  for (int i = 0; i < 2; ++i) {
    for (int c = 0; c < 3; ++c) {
      EXPECT_LE(slots.copy(i, c)->buffer->size(), 2048u);
    }
  }
}

TEST_F(CopySlotsTest, BuffersAreKeptWhileLargeEnoughAndReplacedAfterSync) {
  HostBufferType type("dev", 64, nullptr);
  CopySlots slots(2);
  int syncs = 0;
  auto sync = [&] {
    ++syncs;
    return absl::OkStatus();
  };
  FERRY_ASSERT_OK(slots.Place({{Source(256), &type, nullptr, "dev"}}, sync));
  Buffer* first = slots.copy(0, 0)->buffer;
  // Smaller: same buffer, no synchronization.
  FERRY_ASSERT_OK(slots.Place({{Source(64), &type, nullptr, "dev"}}, sync));
  EXPECT_EQ(slots.copy(0, 0)->buffer, first);
  EXPECT_EQ(syncs, 0);
  // Larger: synchronized once before the old buffer goes.
  FERRY_ASSERT_OK(slots.Place({{Source(4096), &type, nullptr, "dev"},
                               {Source(4096), &type, nullptr, "dev"}},
                              sync));
  EXPECT_EQ(syncs, 1);
}

TEST_F(CopySlotsTest, AFailedAllocationSaysWhichBufferAndHowMuch) {
  FailingBufferType type(64, SIZE_MAX, /*fail_after=*/0);
  CopySlots slots(4);
  EXPECT_THAT(
      slots.Place({{Source(1000), &type, nullptr, "sim1"}}, NoSync),
      StatusIs(absl::StatusCode::kResourceExhausted,
               AllOf(HasSubstr("copies buffer for 'sim1'"),
                     HasSubstr("4 slots x 1 inputs"), HasSubstr("16128 bytes"),
                     HasSubstr("failing: out of memory"))));
  HostBufferType ok("dev", 64, nullptr);
  FailingBufferType staging(64, SIZE_MAX, 0);
  EXPECT_THAT(slots.Place({{Source(10), &ok, &staging, "sim1"}}, NoSync),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("staging buffer for 'sim1'")));
}

TEST_F(CopySlotsTest, TicketsTakeTurnsInOrder) {
  CopySlots slots(2);
  std::vector<int64_t> order;
  std::mutex mu;
  std::vector<std::thread> threads;
  std::vector<int64_t> tickets;
  for (int i = 0; i < 6; ++i) tickets.push_back(slots.TakeTicket());
  EXPECT_EQ(slots.SlotOf(tickets[5]), 1);
  for (int i = 5; i >= 0; --i) {  // Started in reverse: turns still order.
    threads.emplace_back([&, t = tickets[i]] {
      ASSERT_THAT(slots.turns().WaitBlocking(static_cast<uint64_t>(t)), IsOk());
      {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(t);
      }
      slots.PassTurn(t);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(order, tickets);
}

}  // namespace
}  // namespace ferry
