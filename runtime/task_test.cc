#include "ferry/runtime/task.h"

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::StatusIs;

Task<int> Value(int v) { co_return v; }

Task<int> Sum(int a, int b) {
  const int x = co_await Value(a);
  const int y = co_await Value(b);
  co_return x + y;
}

TEST(TaskTest, ReturnsValuesThroughNestedAwaits) {
  EXPECT_EQ(SyncWait(Sum(2, 3)), 5);
}

Task<std::unique_ptr<std::string>> MoveOnly() {
  co_return std::make_unique<std::string>("moved");
}

TEST(TaskTest, CarriesMoveOnlyValues) {
  EXPECT_EQ(*SyncWait(MoveOnly()), "moved");
}

Task<void> AppendTo(std::vector<int>* order, int v) {
  order->push_back(v);
  co_return;
}

Task<void> Sequence(std::vector<int>* order) {
  order->push_back(0);
  co_await AppendTo(order, 1);
  co_await AppendTo(order, 2);
  order->push_back(3);
}

TEST(TaskTest, VoidTasksRunInOrder) {
  std::vector<int> order;
  SyncWait(Sequence(&order));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
}

TEST(TaskTest, IsLazy) {
  std::vector<int> order;
  Task<void> task = AppendTo(&order, 7);
  EXPECT_TRUE(order.empty());
  SyncWait(std::move(task));
  EXPECT_EQ(order, std::vector<int>{7});
}

Task<int> Throws() {
  throw std::runtime_error("boom");
  co_return 0;
}

Task<int> PropagatesThrow() {
  int v = co_await Throws();
  co_return v + 1;
}

TEST(TaskTest, ExceptionsPropagateThroughNestedTasks) {
  EXPECT_THROW(SyncWait(PropagatesThrow()), std::runtime_error);
}

Task<absl::StatusOr<int>> ParsePositive(int v) {
  if (v < 0) co_return absl::InvalidArgumentError("negative");
  co_return v;
}

Task<absl::StatusOr<int>> DoubleParsed(int v) {
  FERRY_CO_ASSIGN_OR_RETURN(int parsed, co_await ParsePositive(v));
  co_return parsed * 2;
}

Task<absl::Status> CheckParsed(int v) {
  FERRY_CO_RETURN_IF_ERROR((co_await ParsePositive(v)).status());
  co_return absl::OkStatus();
}

TEST(TaskTest, StatusErrorsPropagateThroughNestedTasks) {
  EXPECT_EQ(*SyncWait(DoubleParsed(4)), 8);
  EXPECT_THAT(SyncWait(DoubleParsed(-1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SyncWait(CheckParsed(-1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

Task<int> Chain(int depth) {
  if (depth == 0) co_return 0;
  co_return 1 + co_await Chain(depth - 1);
}

// Symmetric transfer: a million synchronously completing nested awaits must
// not grow the stack (this would overflow an 8 MiB stack without it).
TEST(TaskTest, MillionDeepChainDoesNotGrowTheStack) {
  EXPECT_EQ(SyncWait(Chain(1'000'000)), 1'000'000);
}

struct LifetimeProbe {
  explicit LifetimeProbe(int* destroyed) : destroyed(destroyed) {}
  LifetimeProbe(LifetimeProbe&& other) noexcept
      : destroyed(std::exchange(other.destroyed, nullptr)) {}
  ~LifetimeProbe() {
    if (destroyed != nullptr) ++*destroyed;
  }
  int* destroyed;
};

Task<void> HoldsProbe(LifetimeProbe probe) {
  (void)probe;
  co_return;
}

TEST(TaskTest, DestroyingAnUnstartedTaskFreesItsFrame) {
  int destroyed = 0;
  {
    Task<void> task = HoldsProbe(LifetimeProbe(&destroyed));
    EXPECT_EQ(destroyed, 0);
  }
  EXPECT_EQ(destroyed, 1);
}

TEST(TaskTest, MoveAssignmentDestroysThePreviousFrame) {
  int destroyed = 0;
  Task<void> a = HoldsProbe(LifetimeProbe(&destroyed));
  Task<void> b = HoldsProbe(LifetimeProbe(&destroyed));
  a = std::move(b);
  EXPECT_EQ(destroyed, 1);
  EXPECT_FALSE(b.valid());  // NOLINT(bugprone-use-after-move)
  SyncWait(std::move(a));
  EXPECT_EQ(destroyed, 2);
}

TEST(TaskTest, CoInvokeKeepsLambdaCapturesAlive) {
  auto captured = std::make_unique<std::string>("captured");
  Task<size_t> task = CoInvoke(
      [s = std::move(captured)]() -> Task<size_t> { co_return s->size(); });
  // The lambda temporary is gone; its captures live in CoInvoke's frame.
  EXPECT_EQ(SyncWait(std::move(task)), 8u);
}

}  // namespace
}  // namespace ferry
