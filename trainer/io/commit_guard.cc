#include "trainer/io/commit_guard.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ddprun::trainer {
namespace {

// The payload that marks MayCommit's refusal (a code alone would be ambiguous).
constexpr absl::string_view kLeaseExpiredPayload = "ddprun.dev/lease-expired";

}  // namespace

absl::StatusOr<CommitGuard> CommitGuard::Open(const std::string& lease_fd) {
  CommitGuard guard;
  absl::StatusOr<std::unique_ptr<LeaseView>> view = LeaseView::FromVariable(lease_fd);
  if (!view.ok()) return view.status();
  guard.view_ = *std::move(view);
  return guard;
}

absl::Status CommitGuard::MayCommit(absl::string_view what) const {
  if (view_ == nullptr) return absl::OkStatus();
  return MayCommitAt(what, MonotonicNowNs());
}

absl::Status CommitGuard::MayCommitAt(absl::string_view what, int64_t now_ns) const {
  if (view_ == nullptr || view_->ValidAt(now_ns)) return absl::OkStatus();
  const int64_t until = view_->valid_until_ns();
  absl::Status s = absl::UnavailableError(
      until == 0 ? absl::StrCat("not committing ", what,
                                ": ddprun's local lease was never granted (fenced)")
                 : absl::StrFormat("not committing %s: ddprun's local lease expired %.3f s ago "
                                   "(this node may have been given up by its run)",
                                   what, static_cast<double>(now_ns - until) / 1e9));
  s.SetPayload(kLeaseExpiredPayload, absl::Cord("1"));
  return s;
}

bool IsLeaseExpired(const absl::Status& s) {
  return s.GetPayload(kLeaseExpiredPayload).has_value();
}

}  // namespace ddprun::trainer
