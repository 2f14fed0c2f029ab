// gMock matchers for absl::Status and absl::StatusOr (Debian's Abseil ships
// none): IsOk(), StatusIs(code), StatusIs(code, message_matcher), and
// FERRY_ASSERT_OK_AND_ASSIGN for tests.
#ifndef FERRY_RUNTIME_STATUS_MATCHERS_H_
#define FERRY_RUNTIME_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ferry/runtime/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::testing {
namespace internal_status {

inline const absl::Status& GetStatus(const absl::Status& status) {
  return status;
}
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

}  // namespace internal_status

MATCHER(IsOk, "is OK") {
  const absl::Status& status = internal_status::GetStatus(arg);
  if (!status.ok()) *result_listener << "status: " << status;
  return status.ok();
}

MATCHER_P(StatusIs, code,
          std::string("has status code ") +
              absl::StatusCodeToString(static_cast<absl::StatusCode>(code))) {
  const absl::Status& status = internal_status::GetStatus(arg);
  *result_listener << "status: " << status;
  return status.code() == code;
}

MATCHER_P2(StatusIs, code, message_matcher,
           std::string("has status code ") +
               absl::StatusCodeToString(static_cast<absl::StatusCode>(code))) {
  const absl::Status& status = internal_status::GetStatus(arg);
  *result_listener << "status: " << status;
  return status.code() == code &&
         ::testing::ExplainMatchResult(
             message_matcher, std::string(status.message()), result_listener);
}

// Not OK, with a message that `message_matcher` matches (any code).
MATCHER_P(IsErrorWith, message_matcher, "is an error with a matching message") {
  const absl::Status& status = internal_status::GetStatus(arg);
  *result_listener << "status: " << status;
  return !status.ok() &&
         ::testing::ExplainMatchResult(
             message_matcher, std::string(status.message()), result_listener);
}

}  // namespace ferry::testing

#define FERRY_EXPECT_OK(expr) EXPECT_THAT((expr), ::ferry::testing::IsOk())
#define FERRY_ASSERT_OK(expr) ASSERT_THAT((expr), ::ferry::testing::IsOk())

#define FERRY_ASSERT_OK_AND_ASSIGN(lhs, rexpr) \
  FERRY_ASSERT_OK_AND_ASSIGN_IMPL_(            \
      FERRY_STATUS_MACROS_CONCAT_(ferry_statusor_, __LINE__), lhs, rexpr)
#define FERRY_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                     \
  ASSERT_THAT(statusor.status(), ::ferry::testing::IsOk());    \
  lhs = *std::move(statusor)

#endif  // FERRY_RUNTIME_STATUS_MATCHERS_H_
