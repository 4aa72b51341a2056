// LossConfirmation: when suspicions about a node add up to declaring it lost. One observer's
// silence is not enough (the observer's own link or cores may be what failed): a node is lost
// when `observers_required` distinct observers suspect it at once, or on one piece of decisive
// evidence (a TCP reset on its rendezvous stream: its kernel answered, its agent is gone). The
// rule is data (ConfirmationRule), so a test or an operator reads it in one place.
//
// In use with --rdzv-conf liveness=on: the server's gRPC service reports its liveness receiver's
// suspicions here (one observer so far: the server; docs/design.md §3a). Pure: no I/O, no
// clock reads. Not thread-safe.
#ifndef DDPRUN_RENDEZVOUS_DETECTOR_LOSS_CONFIRMATION_H_
#define DDPRUN_RENDEZVOUS_DETECTOR_LOSS_CONFIRMATION_H_

#include <chrono>
#include <map>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "common/clock.h"

namespace ddprun::rendezvous {

// What an observer reports about a suspect.
enum class Evidence {
  kSilence,          // its accrual detector suspects the node (phi_accrual.h)
  kCollectiveError,  // a worker's collective failed on a socket to the node (NCCL, gloo)
  kStreamReset,      // the node's stream ended with a reset: its host is up, its agent is not
};

// The server and one ring neighbour: a cut-off observer alone cannot remove a node.
inline constexpr int kDefaultObserversRequired = 2;
// Observers report every heartbeat (20 ms) while they suspect; a report not renewed for 100 ms
// no longer stands, so two suspicions must overlap in time to count together.
inline constexpr std::chrono::milliseconds kDefaultSuspicionTtl{100};

struct ConfirmationRule {
  int observers_required = kDefaultObserversRequired;
  Duration suspicion_ttl = kDefaultSuspicionTtl;
  // Evidence that declares a node lost alone.
  std::set<Evidence> decisive = {Evidence::kStreamReset};
};

// kInvalidArgument naming the first bad field; OK otherwise.
absl::Status ValidateConfirmationRule(const ConfirmationRule& rule);

struct LossDecision {
  bool lost = false;
  int confirmations = 0;  // distinct observers whose suspicion stands
  bool decisive = false;  // lost on decisive evidence
};

class LossConfirmation {
 public:
  // `rule` must pass ValidateConfirmationRule.
  explicit LossConfirmation(ConfirmationRule rule);

  // `observer` suspects `suspect` (again: a repeat renews the report). A node's reports about
  // itself are ignored.
  void Suspect(const std::string& observer, const std::string& suspect, Evidence evidence,
               TimePoint now);
  // `observer` heard from `suspect` again: its reports about it no longer stand.
  void Withdraw(const std::string& observer, const std::string& suspect);
  // Forgets everything about `node`, as suspect and as observer (it left, or was declared lost
  // and its loss acted on).
  void Forget(const std::string& node);

  // Whether `suspect` is lost at `now`. `observers_available`: how many nodes besides the suspect
  // could observe it now (the server counts as one); with fewer than the rule requires, all of
  // them must agree, and with none, silence decides nothing (the lease still does).
  LossDecision Decide(const std::string& suspect, int observers_available, TimePoint now) const;

 private:
  struct Report {
    TimePoint at;
    Evidence evidence;
  };
  ConfirmationRule rule_;
  // suspect -> observer -> the observer's latest report.
  std::map<std::string, std::map<std::string, Report>> reports_;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_DETECTOR_LOSS_CONFIRMATION_H_
