// Early-return helpers for absl::Status / absl::StatusOr. Abseil 20220623 ships none, so the
// project defines this one pair, once.
#ifndef DDPRUN_COMMON_STATUS_MACROS_H_
#define DDPRUN_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DDPRUN_STATUS_CONCAT_INNER_(a, b) a##b
#define DDPRUN_STATUS_CONCAT_(a, b) DDPRUN_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function if not OK.
#define DDPRUN_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status ddprun_status_ = (expr);          \
    if (!ddprun_status_.ok()) return ddprun_status_; \
  } while (0)

// `lhs` = value of `rexpr` (an absl::StatusOr<T>), or returns its status if not OK.
#define DDPRUN_ASSIGN_OR_RETURN(lhs, rexpr) \
  DDPRUN_ASSIGN_OR_RETURN_IMPL_(DDPRUN_STATUS_CONCAT_(ddprun_statusor_, __LINE__), lhs, rexpr)

#define DDPRUN_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return statusor.status();             \
  lhs = std::move(statusor).value()

#endif  // DDPRUN_COMMON_STATUS_MACROS_H_
