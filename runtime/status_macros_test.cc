#include "ferry/runtime/status_macros.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  FERRY_ASSIGN_OR_RETURN(int half, Half(x));
  FERRY_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status CheckEven(int x) {
  FERRY_RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusMacrosTest, AssignOrReturnPropagatesValueAndError) {
  EXPECT_THAT(Quarter(8), IsOk());
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_THAT(Quarter(6), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Quarter(3), StatusIs(absl::StatusCode::kInvalidArgument,
                                   ::testing::HasSubstr("odd")));
}

TEST(StatusMacrosTest, ReturnIfError) {
  FERRY_EXPECT_OK(CheckEven(4));
  EXPECT_THAT(CheckEven(5), StatusIs(absl::StatusCode::kInvalidArgument));
}

absl::Status CheckEvenIn(int x, int batch) {
  FERRY_RETURN_IF_ERROR(CheckEven(x), "batch ", batch);
  return absl::OkStatus();
}

absl::Status CheckEvenInSplit(int x) {
  FERRY_RETURN_IF_ERROR(CheckEvenIn(x, 7), "split ", 3, " on sim", 1);
  return absl::OkStatus();
}

TEST(StatusMacrosTest, ContextIsAddedOnTheWayUpKeepingTheCode) {
  FERRY_EXPECT_OK(CheckEvenInSplit(2));
  absl::Status status = CheckEvenInSplit(3);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(status.message(), "split 3 on sim1: batch 7: odd");
  EXPECT_EQ(AnnotateStatus(absl::OkStatus(), "ignored"), absl::OkStatus());
}

TEST(StatusMacrosTest, AssertOkAndAssign) {
  FERRY_ASSERT_OK_AND_ASSIGN(int q, Quarter(16));
  EXPECT_EQ(q, 4);
}

TEST(StatusMacrosDeathTest, CheckAbortsOnBrokenInvariant) {
  EXPECT_DEATH(FERRY_CHECK(1 + 1 == 3), "FERRY_CHECK failed");
}

}  // namespace
}  // namespace ferry
