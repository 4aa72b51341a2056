// RunState: the rounds and membership of one rendezvous run (one --rdzv-id), as a pure state
// machine. Inputs are events (join, heartbeat, group status, leave, stream broken, time passing);
// outputs are the messages to push to agent streams. No I/O, no threads, no clock of its own:
// every input carries `now`.
//
// Semantics (docs/design.md, "Rendezvous protocol"):
//  - A forming round completes at once at max_nodes, or at >= min_nodes once last_call_timeout
//    has passed since it first reached min_nodes (failure_last_call_timeout, when set, for the
//    round that follows a failure). join_timeout bounds how long it may stay below
//    min_nodes; then the run closes (kDeadlineExceeded).
//  - While a round runs: a worker failure anywhere or a lost node (stream broken, or no message
//    for the lease) is a failure: it spends one restart of the job-wide max_restarts budget and
//    restarts every surviving member; with the budget spent the run closes
//    (kResourceExhausted) naming the root cause. A node joining while the round is below
//    max_nodes, or a member leaving cleanly, restarts the members without spending the budget.
//  - A node that reports success is told Close(OK) at once (torchrun: each node exits 0 when
//    its group succeeds) and is no reason to restart the others; when every member of a round
//    has succeeded, the run closes OK for everyone still connected.
//  - Ranks (rank_assignment.h): explicit node ranks are honoured; survivors keep their group
//    rank and newcomers fill the holes in arrival order, unless the round shrank below a
//    survivor's rank (then survivors keep their relative order). Nodes beyond max_nodes are
//    spares: they wait, and the next round takes them in arrival order; a survivor is never
//    left out for one.
//  - MASTER_ADDR: the rank-0 agent's --local-addr, else the address the server saw it connect
//    from; if that is loopback while other members are remote, its hostname.
//  - Re-registration (a join with a ResumeClaim): the agent's stream broke, or the server
//    restarted. A run this server has formed no round of goes into kRecovering and is rebuilt
//    from the claims; a run it knows checks the claim against what it knows. The rules are in
//    run_state_recovery.cc.
//
// Not thread-safe; owned by ServerState, which is driven from one event loop.
#ifndef DDPRUN_RENDEZVOUS_CORE_RUN_STATE_H_
#define DDPRUN_RENDEZVOUS_CORE_RUN_STATE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "rendezvous/api/crash_loop.h"
#include "rendezvous/api/rendezvous.h"
#include "rendezvous/api/run_config.h"
#include "rendezvous/api/run_status.h"
#include "rendezvous/checkpoints/checkpoint_advisor.h"
#include "rendezvous/core/last_round_majority.h"
#include "rendezvous/core/outgoing.h"
#include "rendezvous/preflight/preflight_round.h"
#include "rendezvous/stragglers/slow_node_judge.h"

namespace ddprun::rendezvous {

inline constexpr size_t kMaxUntaken = 1024;

// Appends `value`, first dropping the oldest element when `*newest` already holds `max`: the
// newest `max` are kept (a vector or a deque).
template <typename Container>
void PushBounded(Container* newest, typename Container::value_type value, size_t max) {
  if (newest->size() >= max) newest->erase(newest->begin());
  newest->push_back(std::move(value));
}

// The durable part of a run: what a new coordinator needs to continue it when the old one is
// gone (the etcd backend persists it with every change). Connections are not in it: the nodes
// join the new RunState again and Restore() puts them back in their places.
struct RunSnapshot {
  struct Member {
    std::string node_id;
    int group_rank = -1;
    bool in_round = false;
    bool spare = false;     // waited beyond a running round: its next round counts a spare used
    std::string set_aside;  // not empty: set aside until it passes the preflight again (why)
  };
  int64_t round = 0;
  RunPhase phase = RunPhase::kJoining;
  int restarts_used = 0;
  int succeeded_in_round = 0;
  std::vector<Member> members;  // every connected node, members of the round and waiting
  absl::Status close_status;    // when closed
  // The crash-loop breaker's last failure without progress (CrashLoopBreaker::unprogressed), so
  // that a new coordinator still stops the second identical failure.
  std::string crash_loop_signature;
  int64_t spares_used = 0;
  // The preflight's median node, when the run had a preflight: the figures a node set aside
  // must match again.
  std::optional<PreflightFigures> preflight_median;
  // The preflight's verdicts: on etcd, what `ddprun status` shows of it (no server keeps them).
  std::optional<PreflightSummary> preflight;
};

class RunState {
 public:
  // `first` creates the run and sets what every later agent must agree with.
  // `quorum`: kMajorityOfLastRound for an embedded server (last_round_majority.h).
  RunState(const JoinRequest& first, TimePoint now, RoundQuorum quorum = RoundQuorum::kAnyNodes);

  // Adds an agent. Refusals (disagreeing configuration, duplicate node rank or node id, a
  // closed run) close just that stream.
  void Join(ConnId conn, const JoinRequest& request, TimePoint now, Outbox* out);
  // Any message from the agent renews its lease; so does this.
  void Heartbeat(ConnId conn, TimePoint now);
  // A step of the agent's timeline (JSON); the run keeps its latest kMaxSteps.
  void Step(ConnId conn, const std::string& json, TimePoint now);
  // The agent's workers' last signs of life (sent with its heartbeats when hang detection is
  // on): when a round ends in a hang, the rank furthest behind is named to every node.
  void Progress(ConnId conn, const std::vector<RankProgress>& progress, TimePoint now);
  // A member's workers' compute times (issue 41): its slowest rank's figure goes to the run's
  // slow-node judge; the judge's verdict on the node when it changed. Ignored from a node not
  // in the running round.
  // With --evict-slow, a node named slow while a spare stands ready is closed out and the
  // spare takes its group rank (`out`). Declared below: Checkpoint, the advice's reports.
  std::optional<SlowNodeChange> Compute(ConnId conn, const std::vector<RankCompute>& compute,
                                        TimePoint now, Outbox* out);
  // The agent's worker group of `round`. Returns kAborted for a stale round (ignored).
  absl::Status GroupStatus(ConnId conn, int64_t round, GroupState state,
                           const std::optional<WorkerFailure>& failure, TimePoint now, Outbox* out);
  // What a node measured for the checkpoint advice (issue 41): the advice is recomputed.
  void Checkpoint(ConnId conn, const CheckpointReport& report, TimePoint now);
  // The run's checkpoint advice as of its latest report or failure; nullopt before any save
  // time was reported.
  const std::optional<CheckpointAdvice>& checkpoint_advice() const { return checkpoint_advice_; }
  // What a node measured in the preflight (rendezvous/preflight/): when every participant has
  // reported, the verdicts, the slow nodes kept out for spares, and the first round forms.
  void Preflight(ConnId conn, const PreflightReport& report, TimePoint now, Outbox* out);
  // Lines for the server's log since the last call (the preflight's verdicts, a line a node).
  std::vector<std::string> TakeLog() { return std::exchange(log_, {}); }
  // A clean leave: a membership change, never a failure.
  void Leave(ConnId conn, const std::string& reason, TimePoint now, Outbox* out);
  // The stream ended without a leave: the node is lost (a failure if it was in a round).
  void StreamBroken(ConnId conn, TimePoint now, Outbox* out);
  // The liveness path's failure detector (rendezvous/liveness/, docs/design.md §3a) confirmed
  // the node silent for `silent_for` since its last heartbeat: it is lost at once, as with a
  // broken stream (cause kNodeLostSilence, "silent for 0.28 s"), and its stream is told it was
  // given up (CloseNotice::given_up), as with an expired lease.
  void Silent(ConnId conn, Duration silent_for, TimePoint now, Outbox* out);
  // Time passed: last call, join timeout and leases.
  void Tick(TimePoint now, Outbox* out);

  RunSnapshot Snapshot() const;
  // For the server's metrics: the rounds formed and the restarts (their causes) since the
  // last call. At most kMaxUntaken of each are kept, the newest: an owner that never takes
  // them (the etcd coordinator has no metrics) does not make them grow for the whole job.
  std::vector<RoundTiming> TakeRoundTimings() { return std::exchange(round_timings_, {}); }
  std::vector<Cause> TakeRestartCauses() { return std::exchange(restart_causes_, {}); }
  // Continues the run of `snapshot` with the nodes that joined this RunState since it was made
  // (their join messages are not to be sent again). Members of the snapshot's round that did
  // not join again are lost (a failure, as with a broken stream); nodes the snapshot does not
  // know are newcomers.
  void Restore(const RunSnapshot& snapshot, TimePoint now, Outbox* out);

  // When Tick next has something to do; nullopt: nothing pending.
  std::optional<TimePoint> NextDeadline() const;

  bool HasConn(ConnId conn) const { return nodes_.count(conn) > 0; }
  bool HasNode(const std::string& node_id) const { return by_node_id_.count(node_id) > 0; }
  // A re-registration's claim would shape the run (kRecovering, or no round formed yet: a
  // claim starts the recovery), rather than only the claimant's own workers.
  bool RebuildsFromClaims() const {
    return phase_ == RunPhase::kRecovering || (phase_ == RunPhase::kJoining && round_ == 0);
  }
  size_t num_nodes() const { return nodes_.size(); }
  RunPhase phase() const { return phase_; }
  int64_t round() const { return round_; }
  int restarts_used() const { return restarts_used_; }
  const std::string& run_id() const { return run_id_; }
  // Without `with_members`, members and restarts are left empty (num_nodes is always set):
  // /metrics needs the counts, not 10,000 members copied and sorted on the loop every scrape.
  RunStatus Status(bool with_members = true) const;

  // With the liveness path (rendezvous/liveness/, docs/design.md §3a): who may decide that
  // `conn`'s node, fallen silent, is lost. liveness=on: the detector, for any node; auto: the
  // detector for a member of the running round while a spare stands ready to take its group
  // rank, else the lease; off, or an unknown conn: the lease.
  SilenceVerdict SilenceVerdictOf(ConnId conn) const;
  // auto's condition: the round runs and a node waits beyond it (a spare, not set aside).
  bool SpareStandsReady() const {
    return phase_ == RunPhase::kRunning && eligible_nodes() > members_in_round_;
  }
  std::vector<ConnId> Conns() const;
  const LivenessSettings& liveness() const { return timeouts_.liveness; }

 private:
  struct Node {
    ConnId conn = 0;
    NodeInfo info;
    std::string addr;  // master addr if this node gets rank 0
    TimePoint last_seen;
    uint64_t arrival = 0;   // join order
    bool in_round = false;  // a member of the running round
    bool spare = false;     // waited beyond a running round (told by a StandbyNotice)
    int group_rank = -1;    // in the running round, or in the last one it was a member of
    std::vector<RankProgress> progress;  // the latest the agent sent
    TimePoint progress_at{};
    std::optional<ResumeClaim> claim;  // while recovering: what the node re-registered with
    // Set aside (run_state_requalify.cc): kept out by the preflight or evicted as slow; neither
    // a member nor a spare until it passes the preflight again.
    struct SetAside {
      std::string why;         // what set it aside, or the last try that failed
      TimePoint next_try{};    // when it is asked to measure again (no try out)
      int64_t generation = 0;  // the try out (its preflight generation); 0: none
      TimePoint report_due{};  // the try out's deadline
    };
    std::optional<SetAside> set_aside;
  };
  // Nodes that may take a place in a round: connected, not set aside.
  int eligible_nodes() const {
    return static_cast<int>(nodes_.size()) - static_cast<int>(set_aside_.size());
  }
  // Takes `node` (not a member: its round was restarted, or never formed) out of the run's
  // places until it passes the preflight again, told why; or, where there is no preflight to
  // pass (the run has none, or no median from it), closes it out as evicted (`why`).
  void SetAside(Node& node, const std::string& why, TimePoint now, Outbox* out);
  // The run has the figures a node set aside must match again.
  bool CanRequalify() const;
  // Why a joining node is still set aside, if it is: this run set it aside before its
  // connection was lost (under its id or, rejoining as a new node, its former one), or a server
  // that lost the run since did (its claim says so).
  std::optional<std::string> StillSetAside(const JoinRequest& request) const;
  // Time passed for the nodes set aside: asks the ones due to measure again, fails the tries
  // past their deadline.
  void TickSetAside(TimePoint now, Outbox* out);
  void AskToRequalify(Node& node, TimePoint now, Outbox* out);
  // The try of a node set aside failed (`why`): it waits for the next, told why.
  void FailRequalification(Node& node, const std::string& why, TimePoint now, Outbox* out);
  // A set-aside node's report: judged against the preflight's median; passed, it is seated.
  void Requalify(Node& node, const PreflightReport& report, TimePoint now, Outbox* out);
  // A node that may take a place (a newcomer, or one that requalified): in a forming round, a
  // round below max_nodes (restarted for it), or as the last spare.
  void Seat(ConnId conn, const std::string& who, Cause cause, TimePoint now, Outbox* out);
  // Whether Seat gives the node a place (in a forming round, or one restarted for it) rather
  // than a spare's wait.
  bool SeatTakesAPlace() const;
  // Closes `conn`'s node, named slow (`standing`: the judge's figures), out of the run; a free
  // restart gives its group rank to a spare.
  void EvictSlow(ConnId conn, const NodeComputeStanding& standing, TimePoint now, Outbox* out);
  // "rank 3 on n2 (step 57, no progress for 12.3 s)": the member rank with the lowest step,
  // then the oldest sign of life; empty when no member sent progress.
  std::string Straggler(TimePoint now) const;

  // The refusal message for `request`, or OK.
  absl::Status CheckJoin(const JoinRequest& request) const;
  void AddNode(Node node);
  void RemoveNode(ConnId conn);
  void Touch(Node& node, TimePoint now);  // renews the lease
  // A member lost or leaving a round that other members already finished (their groups
  // succeeded): no restart can bring the finished ones back, so there is none; the run closes OK
  // once no member is left. False (nothing done) while no member has finished.
  bool EndsWithoutRestart(Outbox* out);
  // What a restart costs. A failure (a worker failed or hung, a member was lost) spends one
  // restart of the job's --max-restarts budget, closing the run when none is left, and times the
  // next round from it; a membership change (a node joined or left, re-registrations that
  // disagree) is free.
  enum class RestartKind { kFailure, kFree };
  // A member is gone or failed, or the membership changed: restart the survivors.
  void RestartRound(const std::string& reason, Cause cause, RestartKind kind,
                    const std::optional<WorkerFailure>& root_cause, TimePoint now, Outbox* out) {
    RestartRound(reason, cause, kind, root_cause, std::nullopt, now, out);
  }
  // `lost_silent_for`: how long a lost node's loss took to detect (RestartFacts).
  void RestartRound(const std::string& reason, Cause cause, RestartKind kind,
                    const std::optional<WorkerFailure>& root_cause,
                    std::optional<Duration> lost_silent_for, TimePoint now, Outbox* out);
  // `node` waits beyond the running round: a spare, told so (`position` in the spare order).
  void Standby(Node& node, int position, Outbox* out);
  // While joining: forms a round if max is reached or the last call expired (and, with
  // kMajorityOfLastRound, a majority of the last round's members is here).
  void MaybeFormRound(TimePoint now, Outbox* out);
  bool MajorityHeld() const;
  // Connected, under its id or as a node that rejoined after it was given up.
  bool PresentAsMember(const std::string& node_id) const {
    return by_node_id_.count(node_id) > 0 || by_former_id_.count(node_id) > 0;
  }
  void FormRound(TimePoint now, Outbox* out);
  // Where the other nodes reach `node`: the address it connected from, unless that is loopback
  // while `some_peer_remote` (the agent hosting the server reached it through 127.0.0.1 or
  // Debian's 127.0.1.1 hostname entry): then its hostname, as torchrun would use. Its
  // --local-addr as given.
  static std::string AddressForPeers(const Node& node, bool some_peer_remote);
  // Some connected node is not on loopback.
  bool SomeNodeRemote() const;
  // FormRound, after the preflight when the run has one still to do (PreflightDue()).
  void FormRoundAfterPreflight(TimePoint now, Outbox* out);
  // --preflight and no round formed yet, nor a preflight done, and more than one node here.
  bool PreflightDue() const;
  // Asks every node for its measurements (PreflightRound's ring of probes).
  void StartPreflight(TimePoint now, Outbox* out);
  // The verdicts: logged, kept for the status, and the slowest nodes closed out while spares
  // remain to take their places; then the first round forms.
  void FinishPreflight(TimePoint now, Outbox* out);
  // The next round's members by group rank (survivors keep their order; spares fill the
  // holes), at most max_nodes; the nodes left out are told they are spares.
  std::vector<Node*> ChooseMembers(Outbox* out);
  void CloseRun(const absl::Status& status, const std::optional<WorkerFailure>& root_cause,
                Outbox* out, const std::string& straggler = "");
  // The node is gone without a clean leave (stream broken, or silent); `cause` names how.
  // `silent_for`: how long the loss took to detect (RestartFacts::lost_silent_s).
  void LoseNode(ConnId conn, const std::string& why, Cause cause, Duration silent_for,
                TimePoint now, Outbox* out);
  std::string Describe(const Node& node) const;
  int members_in_round() const { return members_in_round_; }

  // Re-registration (run_state_recovery.cc).
  // The node's agent is back on a new stream (its old one is dead, whether or not the
  // transport noticed yet).
  void TakeOver(ConnId conn, const JoinRequest& request, TimePoint now, Outbox* out);
  // A re-registering node this run has no place for in the claimed round: its workers, if
  // any, are stopped; it goes on as a newcomer.
  void AnswerUnknownClaim(const Node& node, const ResumeClaim& claim, Outbox* out);
  void StartRecovery(TimePoint now);
  void AddClaim(Node& node, const ResumeClaim& claim, TimePoint now, Outbox* out);
  // Every member of the newest claimed round is back.
  bool RecoveryComplete() const;
  // Group ranks of `round` that a claim names as gone (ResumeClaim::gone_group_rank).
  std::set<int> GoneGroupRanks(int64_t round) const;
  // Decides the run from the claims: the round goes on, or restarts (the rule is documented
  // in run_state_recovery.cc).
  void Settle(TimePoint now, Outbox* out);
  // Once the claimed round resumed: a node outside it restarts it to join where there is
  // room, else every such node waits as a spare.
  void SeatTheOthers(TimePoint now, Outbox* out);
  // The claims of the newest round: who claims it with workers, the shape they share, their
  // group ranks, and the first thing wrong with them (empty when nothing is).
  struct ClaimSurvey {
    std::vector<ConnId> claimants;
    std::string contradiction;
    std::string told_over;  // a node that was told the round is over
    const Assignment* shape = nullptr;
    std::map<int, ConnId> by_rank;
  };
  ClaimSurvey SurveyClaims(int64_t newest) const;
  // What is wrong with `node`'s claim against the round's shape and the ranks claimed so far
  // (its own rank is added to `by_rank`); empty when nothing is.
  std::string ContradictionOf(ConnId conn, const Node& node, const Assignment& shape,
                              std::map<int, ConnId>* by_rank) const;
  // Applies what the claimants' groups reported while the server was away.
  void ReplayClaimedGroups(const std::vector<ConnId>& claimants,
                           const std::map<ConnId, ResumeClaim>& claims, int64_t newest,
                           TimePoint now, Outbox* out);
  // The majority rule's reference after a recovery: round `newest` as its claims show it.
  void ResetMajorityToClaimedRound(int64_t newest, const std::set<int>& gone);

  const std::string run_id_;
  const int min_nodes_;
  const int max_nodes_;
  const int nproc_per_node_;
  const int max_restarts_;
  const RunTimeouts timeouts_;
  const std::string creator_;  // "node X on host H", for refusal messages
  const RoundQuorum quorum_;

  RunPhase phase_ = RunPhase::kJoining;
  int64_t round_ = 0;                       // the last round formed; 0: none yet
  std::vector<Cause> restart_causes_;       // not yet taken
  std::vector<RestartRecord> restart_log_;  // the latest kMaxRestartRecords
  std::deque<std::string> steps_;           // the latest kMaxSteps
  // The running round's members' compute times; cleared when a round forms (steps of another
  // world do not compare).
  SlowNodeJudge slow_nodes_;
  // The checkpoint advice (issue 41): the run's failures, exposure and costs; and the advice as
  // of the latest of them (recomputed at each report and failure).
  CheckpointAdvisor checkpoints_;
  std::optional<CheckpointAdvice> checkpoint_advice_;
  // The preflight (issue 41): the one running, what the last one found, and whether it ran.
  std::optional<PreflightRound> preflight_round_;
  std::optional<PreflightSummary> preflight_summary_;
  int64_t preflight_generation_ = 0;
  bool preflight_done_ = false;
  // The nodes set aside (Node::set_aside), connected; and every node id set aside and not
  // requalified, connected or not, with why: one that comes back on a new connection is set
  // aside again rather than taken for a newcomer (at most kMaxUntaken).
  std::set<ConnId> set_aside_;
  std::map<std::string, std::string> set_aside_ids_;
  // The preflight's median node (from its verdicts, or a restored snapshot).
  std::optional<PreflightFigures> preflight_median_;
  std::vector<std::string> log_;            // not yet taken
  TimePoint round_began_{};                 // the forming round's start
  std::optional<TimePoint> failed_at_;      // the failure that restarted it
  std::vector<RoundTiming> round_timings_;  // formed, not yet taken
  int restarts_used_ = 0;
  int64_t spares_used_ = 0;  // spares taken into rounds
  int succeeded_in_round_ = 0;
  uint64_t next_arrival_ = 0;
  std::map<ConnId, Node> nodes_;  // every connected agent: members and waiting
  // Indexes over nodes_, so that a join or heartbeat costs O(log n) even with 10,000 nodes.
  std::unordered_map<std::string, ConnId> by_node_id_;
  std::unordered_map<int, ConnId> by_requested_rank_;
  std::unordered_map<std::string, ConnId> by_former_id_;  // NodeInfo::formerly_node_id
  std::set<std::pair<TimePoint, ConnId>> by_last_seen_;
  int members_in_round_ = 0;
  std::optional<TimePoint> join_deadline_;       // set while joining
  std::optional<TimePoint> last_call_deadline_;  // set while joining with >= min nodes
  std::optional<TimePoint> recovery_deadline_;   // set while recovering
  std::string close_message_;
  absl::Status close_status_;     // what CloseRun was given
  LastRoundMajority last_round_;  // used with kMajorityOfLastRound only
  CrashLoopBreaker crash_loop_;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_CORE_RUN_STATE_H_
