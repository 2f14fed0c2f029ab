// Status propagation macros, shaped like Abseil's newer ones (Debian's Abseil
// 20220623 has none): FERRY_RETURN_IF_ERROR and FERRY_ASSIGN_OR_RETURN, plus
// FERRY_CHECK for broken invariants inside ferry (never for user input).
#ifndef FERRY_RUNTIME_STATUS_MACROS_H_
#define FERRY_RUNTIME_STATUS_MACROS_H_

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns from the enclosing function (or coroutine, via co_return in
// FERRY_CO_RETURN_IF_ERROR) if `expr` is not OK.
#define FERRY_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status ferry_status_ = (expr);         \
    if (ABSL_PREDICT_FALSE(!ferry_status_.ok())) { \
      return ferry_status_;                        \
    }                                              \
  } while (false)

#define FERRY_CO_RETURN_IF_ERROR(expr)             \
  do {                                             \
    ::absl::Status ferry_status_ = (expr);         \
    if (ABSL_PREDICT_FALSE(!ferry_status_.ok())) { \
      co_return ferry_status_;                     \
    }                                              \
  } while (false)

#define FERRY_STATUS_MACROS_CONCAT_INNER_(x, y) x##y
#define FERRY_STATUS_MACROS_CONCAT_(x, y) \
  FERRY_STATUS_MACROS_CONCAT_INNER_(x, y)

#define FERRY_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr, ret) \
  auto statusor = (rexpr);                                      \
  if (ABSL_PREDICT_FALSE(!statusor.ok())) {                     \
    ret std::move(statusor).status();                           \
  }                                                             \
  lhs = *std::move(statusor)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status,
// otherwise assigns the value to `lhs` (which may declare a variable).
#define FERRY_ASSIGN_OR_RETURN(lhs, rexpr)                                \
  FERRY_ASSIGN_OR_RETURN_IMPL_(                                           \
      FERRY_STATUS_MACROS_CONCAT_(ferry_statusor_, __LINE__), lhs, rexpr, \
      return )

#define FERRY_CO_ASSIGN_OR_RETURN(lhs, rexpr)                             \
  FERRY_ASSIGN_OR_RETURN_IMPL_(                                           \
      FERRY_STATUS_MACROS_CONCAT_(ferry_statusor_, __LINE__), lhs, rexpr, \
      co_return )

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
