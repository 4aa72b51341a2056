// What a rendezvous reports about a run (the Status call, `ddprun status`, the status page):
// plain values shared by the server, its backends and the agent's status command.
#ifndef DDPRUN_RENDEZVOUS_API_RUN_STATUS_H_
#define DDPRUN_RENDEZVOUS_API_RUN_STATUS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "rendezvous/api/cause.h"
#include "rendezvous/api/checkpoint_advice.h"
#include "rendezvous/api/preflight.h"

namespace ddprun::rendezvous {

// kRecovering: a server that started without state heard from agents re-registering a run it
// does not know; it collects their claims before it decides (run_state_recovery.cc).
enum class RunPhase { kJoining, kRunning, kRecovering, kClosed };
inline const char* RunPhaseName(RunPhase phase) {
  switch (phase) {
    case RunPhase::kJoining:
      return "joining";
    case RunPhase::kRunning:
      return "running";
    case RunPhase::kRecovering:
      return "recovering";
    case RunPhase::kClosed:
      return "closed";
  }
  return "unknown";
}

// How long a round took to form, for the server's latency histograms.
struct RoundTiming {
  double completion_s = 0;  // from the round's start (first join, or the restart) to formed
  std::optional<double> after_failure_s;  // from the failure that restarted it, if one did
};

// A snapshot of a run for the Status call.
struct MemberStatus {
  std::string node_id;
  std::string hostname;
  std::string addr;
  int group_rank = -1;  // -1: waiting for the next round
  int nproc_per_node = 0;
  // "running"; "spare" (connected, not in the running round); "waiting" (no round runs);
  // "recovering" (re-registered, not yet settled).
  std::string state;
  TimePoint last_seen{};  // the agent's last message
  // A running member whose workers report compute times (issue 41): its slowest rank's median
  // compute time per step, that over the job's median node (0: not judged yet), and whether
  // the slow-node judge names it.
  double compute_ms = 0;
  double compute_ratio = 0;
  bool slow = false;
};

// One restart of a run, for the status page.
struct RestartRecord {
  TimePoint when{};
  int64_t round = 0;                  // the round that ended
  Cause cause = Cause::kUnspecified;  // one of kRestartCauses
  std::string reason;
  std::optional<double> formed_after_s;  // until the next round formed
  bool spare_used = false;               // that round took a spare
  // A lost node: how long the loss took to detect (RestartFacts::lost_silent_s).
  std::optional<double> lost_silent_s;
};

struct RunStatus {
  std::string run_id;
  int64_t round = 0;
  RunPhase phase = RunPhase::kJoining;
  std::vector<MemberStatus> members;  // by group rank, then waiting nodes by arrival
  int restarts_used = 0;
  int max_restarts = 0;
  int min_nodes = 0;
  int max_nodes = 0;
  std::string close_message;
  std::vector<RestartRecord> restarts;  // the latest kMaxRestartRecords, oldest first
  int num_nodes = 0;                    // agents connected (= members.size() when listed)
  int spares = 0;           // connected, not in the running round (0 while no round runs)
  int64_t spares_used = 0;  // spares taken into a round since the run began (this coordinator)
  int slow_nodes = 0;       // running members the slow-node judge names (issue 41)
  std::optional<CheckpointAdvice> checkpoint_advice;  // once a save time is known (issue 41)
  std::optional<PreflightSummary> preflight;          // once one started (--preflight, issue 41)
  std::vector<std::string> steps;  // the agents' latest timeline steps (JSON), oldest first
  // The gRPC server process that answered (random per process; empty from etcd): one server
  // reached under two names is one server.
  std::string server_instance;
};

inline constexpr size_t kMaxRestartRecords = 20;
inline constexpr size_t kMaxSteps = 60;

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_API_RUN_STATUS_H_
