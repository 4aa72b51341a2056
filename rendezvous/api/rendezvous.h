// The agent's view of a rendezvous: join a run, learn this node's place in each round, report
// how the local worker group is doing, and be told to restart or to stop.
//
// Implementations: LocalRendezvous (one node, or torch.distributed.launch-style static
// multi-node; launcher/), and the gRPC client of the built-in server and the etcd v3 backend
// (rendezvous/). All of them deliver events through RendezvousEvents on the agent's Executor,
// so the agent's state is only ever touched from its own loop thread.
#ifndef DDPRUN_RENDEZVOUS_API_RENDEZVOUS_H_
#define DDPRUN_RENDEZVOUS_API_RENDEZVOUS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "rendezvous/api/cause.h"
#include "rendezvous/api/checkpoint_advice.h"
#include "rendezvous/api/preflight.h"

namespace ddprun::rendezvous {

// What an agent says about itself when it joins.
struct NodeInfo {
  std::string run_id;
  std::string node_id;  // unique per agent process: "<hostname>_<pid>_<random>"
  std::string hostname;
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc_per_node = 1;
  int requested_node_rank = -1;  // -1: any; else an explicit --node-rank / SLURM_NODEID
  std::string local_addr;        // --local-addr; empty: the server uses the peer address
  int master_port = 0;           // port this agent has reserved for its rank-0 worker
  int max_restarts = 0;          // --max-restarts: the job-wide budget; agents of a run agree
  // A node that its run gave up and that rejoins as a new node: the id it had (so that a
  // server waiting for a majority of the last round counts it as that member, back).
  std::string formerly_node_id;
  // The agent's preflight probe listener (launcher/preflight/), on every address; 0: none.
  int preflight_port = 0;
};

// This node's place in one round. Workers of the round get their environment from it.
// A member of a round, as a place the run's rendezvous server can move to.
struct Successor {
  std::string node_id;
  std::string addr;
};

struct Assignment {
  int64_t round = 0;         // increases by one per round of the run, never reused
  int group_rank = 0;        // this node's rank among the nodes of the round
  int group_world_size = 1;  // nodes in the round
  int rank_offset = 0;       // global rank of this node's LOCAL_RANK=0 worker
  int world_size = 1;        // workers in the round, all nodes together
  std::string master_addr;   // where the rank-0 worker's TCPStore listens
  int master_port = 0;
  int restart_count = 0;  // failure-triggered restarts spent so far (job-wide)
  int max_restarts = 0;
  // The round's members in group-rank order (the c10d backend fills it): when the agent that
  // hosts the server is gone, the first of them that is not that agent serves the run next.
  std::vector<Successor> successors;
};

// The first failure of a worker group, as the agent that saw it reports it.
struct WorkerFailure {
  std::string hostname;
  int rank = -1;
  int local_rank = -1;
  int pid = 0;
  int exit_code = 0;    // when it exited
  int signal = 0;       // when a signal killed it (then exit_code is unused)
  std::string message;  // the error file's message, or the tail of stderr
  bool hang = false;    // the worker did not exit: it hung (message says how)
  // Why it died, from the kernel's evidence: one of kDeathCauses (cause.h), and the line that
  // says it ("killed by the OOM killer: memory cgroup limit 64.0 GiB reached ...").
  Cause cause_kind = Cause::kUnspecified;
  std::string cause;
  // For the crash-loop breaker (crash_loop.h): how it failed, as one string that is equal for
  // the same failure (empty: the breaker is off), and whether this node's workers made progress
  // in the attempt that failed.
  std::string signature;
  bool made_progress = false;
};

// A local worker's last sign of life, carried in heartbeats so that the rendezvous can name the
// straggler of a hang job-wide.
struct RankProgress {
  int rank = 0;
  int64_t step = -1;    // last step reported; -1: the worker reports no steps
  int64_t idle_ms = 0;  // since its last sign of life, when the agent sent this
};

// How long one local worker computed per step before it waited on the step's collective (the
// worker reports it per step, DDPRUN_PROGRESS_FILE's "compute_ms"): the median over the steps
// it reported since the agent's last report. The server names a node persistently slower than
// the job from these (rendezvous/stragglers/, issue 41).
struct RankCompute {
  int rank = 0;
  double compute_ms = 0;
  int64_t steps = 0;  // steps the median covers
};

// What a node measured for the server's judges since its last report (the agent reports every
// 5 s while its workers train), in one message: its workers' compute times for the slow-node
// judge and its checkpoint costs for the advice (checkpoint_advice.h).
struct NodeFigures {
  std::vector<RankCompute> compute;  // empty: no worker reported a step since
  CheckpointReport checkpoint;
  bool empty() const { return compute.empty() && checkpoint.empty(); }
};

// A round ended because a worker hung somewhere: every node takes its workers' stacks before
// stopping them. `straggler` names the rank furthest behind, job-wide ("rank 3 on n2 (step 57,
// no progress for 12.3 s)"), when the nodes reported progress.
struct HangNotice {
  std::string straggler;
};

// What the server knows of a restart beyond its cause (issue 40), for the goodput ledger.
struct RestartFacts {
  bool spare_used = false;  // the round formed at once after it took a spare
  // A lost node: how long the loss took to detect. Its silence (now minus its last sign of life)
  // when a silence lost it; 0 when its stream broke while it was heard from. Unset otherwise.
  std::optional<double> lost_silent_s;
};

// This node is a spare: connected, not in the running round `round` (of `members` nodes). The
// next round that needs a node takes the spares in `position` order (0 first).
//
// Or, with `set_aside` non-empty, not a spare yet (issue 41): the preflight kept it out, or
// --evict-slow evicted it, and it waits out of the run until it passes the preflight again
// (`set_aside` says why it waits: the eviction, or the last requalification that failed). A
// member told so stops its workers.
struct StandbyNotice {
  int64_t round = 0;
  int members = 0;
  int position = 0;
  std::string set_aside;
};

enum class GroupState { kRunning, kSucceeded, kFailed };

// What a node knows of its place in the run. Sent when it re-registers (its stream broke, or it
// rejoins after fencing) so that a rendezvous server that lost the run (restarted without state)
// can rebuild it from the agents instead of restarting every worker.
struct ResumeClaim {
  enum class Group { kWaiting, kRunning, kSucceeded, kFailed };
  Assignment last;        // the last round this node was assigned; last.round == 0: none yet
  int restarts_used = 0;  // the most this node has heard of
  Group group = Group::kWaiting;         // its worker group of last.round
  std::optional<WorkerFailure> failure;  // with kFailed
  // A member of last.round whose agent is known to be gone (the host of an embedded server
  // that failed over): a recovering server settles without waiting a lease for it.
  std::optional<int> gone_group_rank;
  // What the server said when it set this node aside (StandbyNotice::set_aside); empty: it did
  // not, or the node took a place since. A server that lost the run keeps it out all the same.
  std::string set_aside;

  // What a reported group state makes of the claim's group (the client and a recovering server
  // both keep a claim current with the group statuses they see).
  void Report(GroupState state, const std::optional<WorkerFailure>& reported) {
    group = state == GroupState::kRunning     ? Group::kRunning
            : state == GroupState::kSucceeded ? Group::kSucceeded
                                              : Group::kFailed;
    failure = reported;
  }
};

// Callbacks to the agent. Always invoked on the agent's Executor.
class RendezvousEvents {
 public:
  virtual ~RendezvousEvents() = default;
  // A round formed and this node is in it: (re)start workers with this assignment.
  virtual void OnAssignment(const Assignment& assignment) = 0;
  // The current round is over (a failure somewhere, a node lost or joining): stop the workers
  // and wait for the next assignment. `cause`: why (one of kRestartCauses; kUnspecified from a
  // server that does not say); `reason` is one human-readable line, for people only. `facts`:
  // what the server measured (a spare taken, the lost node's silence), for the goodput ledger.
  virtual void OnRestart(Cause cause, const std::string& reason,
                         const std::optional<HangNotice>& hang, const RestartFacts& facts) = 0;
  // This node waits as a spare beyond the running round (no workers until an assignment).
  virtual void OnStandby(const StandbyNotice& standby) {}
  // The run is over for this node. OK: the job succeeded. kResourceExhausted: the restart
  // budget is spent (exit 1). IsCrashLoopStop (crash_loop.h): the crash-loop breaker stopped
  // it (exit 4). Anything else: rendezvous failure (exit 3), message says why.
  virtual void OnClosed(const absl::Status& status, const std::optional<HangNotice>& hang) = 0;
  // The connection to the rendezvous broke and the backend tries again: after the join, the
  // workers keep running while the agent re-registers (until read_timeout); before it, the join
  // is retried within its budget. `why` is one line, for the log.
  virtual void OnReconnecting(const std::string& why) {}
  // The rendezvous took this node back after a reconnect: `round` goes on, workers untouched.
  virtual void OnResumed(int64_t round) {}
  // The run's checkpoint advice changed (issue 41): seconds of training between checkpoints.
  virtual void OnCheckpointAdvice(double interval_s) {}
  // Before the first round: measure this node and probe `request.targets`, then
  // Rendezvous::ReportPreflight (issue 41, docs/design.md §3d). The round waits for the report.
  virtual void OnPreflight(const PreflightRequest& request) {}
};

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  // Starts joining the run. Events follow on `events`; the object must outlive this.
  virtual void Join(const NodeInfo& node, RendezvousEvents* events) = 0;
  // How the local worker group of `round` is doing. `failure` is set with kFailed.
  virtual void ReportGroupState(int64_t round, GroupState state,
                                const std::optional<WorkerFailure>& failure) = 0;
  // The last sign of life of this node's workers. Sent with the next heartbeat; `urgent`
  // (before reporting a hang) sends it at once.
  virtual void ReportProgress(const std::vector<RankProgress>& progress, bool urgent) = 0;
  // A step of this agent's run timeline (a JSON object), for the server's status page. Best
  // effort: dropped while not connected; a backend without a page ignores it.
  virtual void ReportStep(const std::string& json) {}
  // What this node measured for the server's judges since its last report (NodeFigures). Best
  // effort: dropped while not connected; a backend without the judges ignores it.
  virtual void ReportFigures(const NodeFigures& figures) {}
  // What this node measured for the preflight it was asked for (OnPreflight). Dropped while not
  // connected: the server's deadline names a node that never reports.
  virtual void ReportPreflight(const PreflightReport& report) {}
  // This node leaves the run (after success, or on a signal). Idempotent; no events follow.
  virtual void Leave(const std::string& reason) = 0;
  // This node sits out the rounds to come (its --health-check failed; its workers are stopped):
  // the run goes on without it as after a clean leave (a membership change, no budget spent;
  // an elastic run forms its rounds without it, a fixed one waits for it within join_timeout).
  // No events until StepIn(), which brings it back as a new node (a scale-up for the others).
  // Called only between Join and Leave, with no workers running, and in that order.
  virtual void StepOut(const std::string& reason) = 0;
  virtual void StepIn() = 0;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_API_RENDEZVOUS_H_
