// The crash-loop breaker (issue 25): a failure that repeats with the same signature before any
// sign of progress is not retried until the budget is gone. A worker that fails the same way
// at start-up twice (a missing module, a bad path, a wrong flag) will fail the same way every
// time; restarting it ten more times only delays the answer and, on a cluster, keeps
// requeueing a job that cannot run.
//
// Progress (what the failing node's agent saw in the attempt that failed): a step report from
// any of its workers (the progress file, ddp-train's steps) or a line on any worker's stdout.
// Stderr does not count: tracebacks and warnings go there. The signature: how the worker
// ended (its cause from the kernel's evidence, exit code or signal) and its message (the error
// file's, else its last stderr line). Both are set by the agent in the WorkerFailure it reports;
// an empty signature (the breaker turned off, `--crash-loop=retry`) never matches.
//
// Used by every place that decides restarts: RunState (c10d, etcd) and the local rendezvous,
// and only while restarts remain (a failure that spends the last of the budget ends the job
// with exit 1, as before).
#ifndef DDPRUN_RENDEZVOUS_API_CRASH_LOOP_H_
#define DDPRUN_RENDEZVOUS_API_CRASH_LOOP_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "rendezvous/api/rendezvous.h"

namespace ddprun::rendezvous {

class CrashLoopBreaker {
 public:
  CrashLoopBreaker() = default;
  // Continues from `unprogressed()` of a breaker before it (a new etcd coordinator).
  explicit CrashLoopBreaker(std::string unprogressed) : unprogressed_(std::move(unprogressed)) {}

  // A failure that would restart the job: true when it repeats the previous failure's
  // signature and neither attempt made progress (then the job stops). A failure after progress,
  // or a different one, starts counting again.
  bool Repeats(const WorkerFailure& failure) {
    if (failure.signature.empty() || failure.made_progress) {
      unprogressed_.clear();
      return false;
    }
    if (failure.signature == unprogressed_) return true;
    unprogressed_ = failure.signature;
    return false;
  }

  // What a successor needs to go on counting (RunSnapshot).
  const std::string& unprogressed() const { return unprogressed_; }

 private:
  std::string unprogressed_;  // the last failure's signature when it made no progress
};

// The close message: "the same failure twice before any progress: not restarting (WHAT)".
inline std::string CrashLoopMessage(const std::string& what) {
  return "the same failure twice before any progress: not restarting (" + what + ")";
}

// The run's close status when the breaker stopped it: kAborted (the wire's Close.code, which
// agents from before Close.ending read as the crash loop), marked as the crash loop so that it
// is never taken for another kAborted (a stale round's, say). The agents exit 4.
inline constexpr char kCrashLoopPayloadUrl[] = "type.googleapis.com/ddprun.CrashLoop";
inline absl::Status CrashLoopStop(const std::string& message) {
  absl::Status status = absl::AbortedError(message);
  status.SetPayload(kCrashLoopPayloadUrl, absl::Cord("crash_loop"));
  return status;
}
inline bool IsCrashLoopStop(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted &&
         status.GetPayload(kCrashLoopPayloadUrl).has_value();
}

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_API_CRASH_LOOP_H_
