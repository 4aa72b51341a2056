// CommitGuard: ddp-train's side of ddprun's local lease (common/lease_page.h; docs/design.md,
// "Fencing"). A worker of a node its run may have given up (the agent stopped by SIGSTOP, a
// frozen VM, a cut link) must not commit anything another worker may commit in its place: the
// trainer asks MayCommit before each step's collective, before it counts a finished step, and
// before it writes a checkpoint (file and pointer). Past the lease the answer is an error
// IsLeaseExpired() recognizes: in-process the worker drops its group and waits for the agent's
// next round; otherwise ddp-train exits kExitLeaseExpired.
//
// Without DDPRUN_LEASE_FD (torchrun, other backends, older agents) every commit is allowed.
// Thread-compatible; copies share the mapping.
#ifndef DDPRUN_TRAINER_IO_COMMIT_GUARD_H_
#define DDPRUN_TRAINER_IO_COMMIT_GUARD_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/lease_page.h"

namespace ddprun::trainer {

// ddp-train's exit code when it stopped on an expired lease (cold mode); EX_TEMPFAIL.
inline constexpr int kExitLeaseExpired = 75;

class CommitGuard {
 public:
  CommitGuard() = default;  // no lease: everything may be committed
  // `lease_fd`: DDPRUN_LEASE_FD's value (DistEnv::lease_fd); empty: no lease. A bad value is
  // an error naming the variable.
  static absl::StatusOr<CommitGuard> Open(const std::string& lease_fd);

  // OK while the lease is valid (or there is none); else the lease-expired error, naming `what`
  // ("step 12", "the checkpoint of step 12").
  absl::Status MayCommit(absl::string_view what) const;
  absl::Status MayCommitAt(absl::string_view what, int64_t now_ns) const;
  bool has_lease() const { return view_ != nullptr; }

 private:
  std::shared_ptr<LeaseView> view_;
};

// Whether `s` is MayCommit's refusal.
bool IsLeaseExpired(const absl::Status& s);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IO_COMMIT_GUARD_H_
