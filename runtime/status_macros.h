// Status propagation macros, shaped like Abseil's newer ones (Debian's Abseil
// 20220623 has none): FERRY_RETURN_IF_ERROR and FERRY_ASSIGN_OR_RETURN, plus
// FERRY_CHECK for broken invariants inside ferry (never for user input).
//
// Errors gain context on the way up, as IREE's IREE_RETURN_IF_ERROR(expr,
// "fmt", ...) does: extra arguments are joined (absl::StrCat) and put in
// front of the message, keeping the code:
//   FERRY_RETURN_IF_ERROR(backend.EnqueueCompute(nodes), "split ", s, " on ",
//                         backend.name());
//   -> "split 3 on sim1: sim1/compute: injected fault: kernel mul_mat ..."
#ifndef FERRY_RUNTIME_STATUS_MACROS_H_
#define FERRY_RUNTIME_STATUS_MACROS_H_

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace ferry {

// Returns `status` with StrCat(context...) and ": " in front of its message
// (unchanged when there is no context or it is OK).
template <typename... Context>
absl::Status AnnotateStatus(absl::Status status, const Context&... context) {
  if constexpr (sizeof...(Context) == 0) {
    return status;
  } else {
    if (status.ok()) return status;
    return absl::Status(status.code(), absl::StrCat(absl::StrCat(context...),
                                                    ": ", status.message()));
  }
}

}  // namespace ferry

// Returns from the enclosing function (or coroutine, via co_return in
// FERRY_CO_RETURN_IF_ERROR) if `expr` is not OK, with the optional context
// arguments in front of the message.
#define FERRY_RETURN_IF_ERROR(expr, ...)                                     \
  do {                                                                       \
    ::absl::Status ferry_status_ = (expr);                                   \
    if (ABSL_PREDICT_FALSE(!ferry_status_.ok())) {                           \
      return ::ferry::AnnotateStatus(std::move(ferry_status_) __VA_OPT__(, ) \
                                         __VA_ARGS__);                       \
    }                                                                        \
  } while (false)

#define FERRY_CO_RETURN_IF_ERROR(expr, ...)                              \
  do {                                                                   \
    ::absl::Status ferry_status_ = (expr);                               \
    if (ABSL_PREDICT_FALSE(!ferry_status_.ok())) {                       \
      co_return ::ferry::AnnotateStatus(std::move(ferry_status_)         \
                                            __VA_OPT__(, ) __VA_ARGS__); \
    }                                                                    \
  } while (false)

#define FERRY_STATUS_MACROS_CONCAT_INNER_(x, y) x##y
#define FERRY_STATUS_MACROS_CONCAT_(x, y) \
  FERRY_STATUS_MACROS_CONCAT_INNER_(x, y)

#define FERRY_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr, ret, ...)        \
  auto statusor = (rexpr);                                                  \
  if (ABSL_PREDICT_FALSE(!statusor.ok())) {                                 \
    ret ::ferry::AnnotateStatus(std::move(statusor).status() __VA_OPT__(, ) \
                                    __VA_ARGS__);                           \
  }                                                                         \
  lhs = *std::move(statusor)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status
// (with the optional context in front, as FERRY_RETURN_IF_ERROR), otherwise
// assigns the value to `lhs` (which may declare a variable).
#define FERRY_ASSIGN_OR_RETURN(lhs, rexpr, ...)                           \
  FERRY_ASSIGN_OR_RETURN_IMPL_(                                           \
      FERRY_STATUS_MACROS_CONCAT_(ferry_statusor_, __LINE__), lhs, rexpr, \
      return __VA_OPT__(, ) __VA_ARGS__)

#define FERRY_CO_ASSIGN_OR_RETURN(lhs, rexpr, ...)                        \
  FERRY_ASSIGN_OR_RETURN_IMPL_(                                           \
      FERRY_STATUS_MACROS_CONCAT_(ferry_statusor_, __LINE__), lhs, rexpr, \
      co_return __VA_OPT__(, ) __VA_ARGS__)

// Aborts with a message when an internal invariant is broken.
#define FERRY_CHECK(cond)                                               \
  do {                                                                  \
    if (ABSL_PREDICT_FALSE(!(cond))) {                                  \
      std::fprintf(stderr, "%s:%d: FERRY_CHECK failed: %s\n", __FILE__, \
                   __LINE__, #cond);                                    \
      std::abort();                                                     \
    }                                                                   \
  } while (false)

#endif  // FERRY_RUNTIME_STATUS_MACROS_H_
