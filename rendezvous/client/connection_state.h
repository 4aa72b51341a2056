// ConnectionStateMachine: the decisions of the agent's side of the built-in rendezvous
// (RendezvousClient, rendezvous/grpc/rendezvous_client.h) as a pure state machine. Inputs are
// events (what the server said, how the stream ended, a timer, a probe's answer, a call of the
// agent), each with the time it happened; outputs are ClientActions, which the client executes
// in order (start or cancel a stream, arm a timer, probe an address, tell the agent). No
// sockets, no threads, no clock reads: tests drive it on a fake clock (tests/rendezvous/client).
//
//   kIdle --Join--> kJoining --Joined--> kJoined --stream broke--> kReconnecting --Joined--+
//                     ^  | broke: retry within the budget   |  | (embedded server)      |
//                     +--+                                   |  v                         |
//                     |  lease of silence, elastic (fenced)  | kProbingHost --refused-->  |
//                     +--------------------------------------+  kFailingOver --Joined-----+
//   kReconnecting <--> kServerDown (the address refuses: silence does not count)
//   any --StepOut--> kSteppedOut --StepIn--> kJoining;  any --Close/Leave--> kClosed
//
// docs/design.md ("The rendezvous client") tells the story; the timing constants are below.
//
// Thread-compatible: one thread (the client's loop) calls it.
#ifndef DDPRUN_RENDEZVOUS_CLIENT_CONNECTION_STATE_H_
#define DDPRUN_RENDEZVOUS_CLIENT_CONNECTION_STATE_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "rendezvous/api/cause.h"
#include "rendezvous/api/rendezvous.h"
#include "rendezvous/api/run_config.h"
#include "rendezvous/client/endpoint_probe.h"

namespace ddprun::rendezvous {

// Every timing of the client's decisions that is not a run or client option.
// A broken stream is tried again after 100 ms, doubling to 1 s: a server that accepts and drops
// the stream at once must not turn retries into a busy loop.
inline constexpr std::chrono::milliseconds kFirstRetryBackoff{100};
inline constexpr std::chrono::milliseconds kMaxRetryBackoff{1000};
inline constexpr int kRetryBackoffDoublings = 4;
// An embedded server's stream broke: its address is probed for up to this long.
inline constexpr std::chrono::milliseconds kFailoverProbing{1000};
// ... every 50 ms, each probe bounded by [kHostProbeMin, kHostProbeMax] ...
inline constexpr std::chrono::milliseconds kHostProbeInterval{50};
inline constexpr std::chrono::milliseconds kHostProbeMin{50};
inline constexpr std::chrono::milliseconds kHostProbeMax{500};
// ... and a listener that accepts this many times in a row is a server (200 ms).
inline constexpr int kAcceptingProbesToReconnect = 5;
// A probe while judging silence without a stream: at most this, and at most a heartbeat.
inline constexpr std::chrono::milliseconds kSilenceProbeMax{500};
// Asking another host whether it serves the run (MaybeLookForTheRun): the TCP probe, then the
// Status call.
inline constexpr std::chrono::milliseconds kLookProbeTimeout{300};
inline constexpr std::chrono::milliseconds kLookRpcTimeout{1000};
// How many members of earlier rounds are remembered as places the run may be served.
inline constexpr size_t kMaxEarlierMembers = 64;

enum class ConnectionState {
  kIdle,          // before Join
  kJoining,       // a join is out, not yet acknowledged (first join, retries, as a new node)
  kJoined,        // the server acknowledged the join: heartbeats, fencing on silence
  kProbingHost,   // an embedded server's stream broke: is its address refusing, silent, there?
  kReconnecting,  // the stream broke after the join: re-registering, workers keep running
  kServerDown,    // reconnecting while the address refuses: silence counts from its return
  kFailingOver,   // reconnecting to the successors of the last assignment, a lease each
  kSteppedOut,    // between StepOut and StepIn
  kClosed,        // the run is over for this node (closed, left, or cancelled)
};
const char* ConnectionStateName(ConnectionState state);

// Where and how to send liveness heartbeats (Joined; rendezvous/liveness/): port 0, none.
struct LivenessTarget {
  int port = 0;
  uint32_t node_index = 0;
  std::string salt;
  LivenessSettings settings;
};

// One message of the server, as the machine needs it (the client converts the proto).
struct ServerWord {
  enum class Kind {
    kAck,
    kJoined,
    kAssignment,
    kRestart,
    kResumed,
    kClose,
    kStandby,
    kPreflight,
    kUnknown
  };
  Kind kind = Kind::kAck;
  bool embedded = false;               // kJoined: the server lives in an agent
  std::string host_node_id;            // kJoined, kAssignment: that agent's node (empty: unsaid)
  std::string member_key;              // kJoined
  int64_t keep_alive_interval_ms = 0;  // kJoined: the run's (0: unsaid)
  LivenessTarget liveness;             // kJoined
  Assignment assignment;               // kAssignment
  Cause cause = Cause::kUnspecified;   // kRestart
  int restart_count = 0;               // kRestart
  int64_t round = 0;                   // kRestart, kResumed
  std::string reason;                  // kRestart
  std::optional<HangNotice> hang;      // kRestart, kClose
  RestartFacts facts;                  // kRestart
  StandbyNotice standby;               // kStandby
  PreflightRequest preflight;          // kPreflight
  bool given_up = false;               // kClose: the server gave this node up
  std::string message;                 // kClose
  absl::Status close_status;           // kClose
};

// How a stream ended (its gRPC status, reduced to what the decisions tell apart).
struct StreamEnd {
  enum class Code { kOk, kUnauthenticated, kUnavailable, kOther };
  Code code = Code::kOk;
  int grpc_code = 0;  // for messages
  std::string message;
};

// A timer's or a probe's reason, handed back with OnWake / OnProbed.
struct Wake {
  enum class Kind {
    kReadTimeout,   // the budget of call `generation` to be acknowledged
    kHeartbeat,     // heartbeat and judge the silence
    kRetryJoin,     // a join that broke before its acknowledgement, after the backoff
    kReconnect,     // a re-registration, after the backoff
    kProbeHost,     // kProbingHost: `why`, `until`, `accepting_in_a_row`
    kJudgeSilence,  // a probe while reconnecting (kProbe only)
  };
  Kind kind = Kind::kHeartbeat;
  uint64_t generation = 0;
  std::string why;
  TimePoint until{};
  int accepting_in_a_row = 0;
};

// A server of this run: where, and how it is doing (MaybeLookForTheRun's answer).
struct RunServer {
  std::string endpoint;
  int64_t round = 0;
  size_t agents = 0;
  int order = -1;  // -1: the endpoint the user gave; else the host's group rank
};

struct ClientAction {
  enum class Type {
    // The connection.
    kStartCall,      // a stream to endpoint() with a join (resume claim when ever_joined());
                     // call `generation`, its read timeout at `at` (a Wake kReadTimeout)
    kCancelCall,     // cancel the current stream, if any
    kRetireCall,     // the current stream is no longer current (its last reactions are dropped)
    kNewEndpoint,    // endpoint() changed: the next call makes a new channel
    kResetBackoff,   // the server's address accepts again: let the channel connect now
    kSendHeartbeat,  // with the latest progress
    kSendLeave,      // `message`
    kCutCallLater,   // at `at`, cancel the stream that is current now, if still open
    kWakeAt,         // at `at`, OnWake(`wake`)
    kCancelWake,     // the pending kReadTimeout or kHeartbeat wake (`wake.kind`)
    kProbe,          // ProbeEndpoint(`endpoint`, `timeout`) now, then OnProbed(`wake`, result)
    kHostHere,       // this agent starts serving the run on `port` (ClientOptions::host_failover)
    kStopHosting,    // ClientOptions::stop_hosting
    kLookForTheRun,  // ask `others` whether one serves the run and went on; OnLookAnswered
    // Heartbeat datagrams to endpoint()'s host at `liveness` (LivenessSender), replacing any
    // before; they report OnServerSilent(`generation`). They end when the machine leaves
    // kJoined (the client stops them after any event that leaves that state).
    kStartLiveness,
    // To the agent (RendezvousEvents through EventDelivery).
    kAssigned,         // `assignment`
    kRestart,          // `cause`, `message`, `hang`, `facts`
    kStandby,          // `standby`: this node waits as a spare
    kPreflight,        // `preflight`: measure this node and probe its targets
    kResumed,          // `round`
    kReconnecting,     // `message`
    kRejoinAsNewNode,  // `message`; mutable_node() renamed
    kRenameForRejoin,  // mutable_node() renamed
    kClose,            // OnClosed(`status`, `hang`)
    kCloseQuietly,     // over without an OnClosed (Leave, a test's cancel)
  };
  explicit ClientAction(Type t) : type(t) {}
  Type type;
  TimePoint at{};
  uint64_t generation = 0;
  Wake wake;
  std::string endpoint;
  std::chrono::milliseconds timeout{0};
  std::string message;
  int port = 0;
  Assignment assignment;
  int64_t round = 0;
  Cause cause = Cause::kUnspecified;
  std::optional<HangNotice> hang;
  RestartFacts facts;          // kRestart
  StandbyNotice standby;       // kStandby
  PreflightRequest preflight;  // kPreflight
  absl::Status status;
  LivenessTarget liveness;        // kStartLiveness
  RunServer mine;                 // kLookForTheRun
  std::vector<RunServer> others;  // kLookForTheRun
};
using ClientActions = std::vector<ClientAction>;

struct ConnectionConfig {
  std::string endpoint;  // the server the user named
  RunTimeouts timeouts;  // keep_alive_interval/max_attempt (the lease), join_timeout
  std::chrono::milliseconds read_timeout{60000};
  std::chrono::milliseconds close_timeout{2000};
  HostLoss host_loss = HostLoss::kFailOver;
  bool can_host = false;           // kHostHere is possible (ClientOptions::host_failover set)
  bool looks_for_the_run = false;  // kLookForTheRun is possible (stop_hosting set)
};

class ConnectionStateMachine {
 public:
  explicit ConnectionStateMachine(ConnectionConfig config);

  // The agent.
  ClientActions OnJoin(const NodeInfo& node, TimePoint now);
  ClientActions OnStepOut(const std::string& reason, TimePoint now);
  ClientActions OnStepIn(TimePoint now);
  ClientActions OnLeave(const std::string& reason, TimePoint now);
  ClientActions OnCancelForTesting();
  // Progress to send with heartbeats; `urgent` sends it now (kSendHeartbeat) when joined.
  ClientActions OnProgress(bool urgent);
  // Whether a step or a group status may be sent now.
  bool MaySendStep() const;
  bool MaySendGroupState() const;
  // Keeps the resume claim current (before MaySendGroupState).
  void OnGroupState(int64_t round, GroupState state, const std::optional<WorkerFailure>& failure);

  // The connection. Events of a call other than the current generation are ignored.
  ClientActions OnServerWord(uint64_t generation, const ServerWord& word, TimePoint now);
  ClientActions OnStreamEnd(uint64_t generation, const StreamEnd& end, TimePoint now);
  ClientActions OnStartFailed(const absl::Status& status);  // kStartCall had no channel
  ClientActions OnWake(const Wake& wake, TimePoint now);
  // The liveness sender `generation` (kStartLiveness) heard no ack for `silent_for`: its
  // detector suspects the server. While joined, the node fences as on a lease of silence (the
  // server, by its own detector, gives it up in the same few hundred ms).
  ClientActions OnServerSilent(uint64_t generation, Duration silent_for, TimePoint now);
  ClientActions OnProbed(const Wake& wake, ProbeResult result, TimePoint now);
  // kLookForTheRun's answer: the server to move to, if any, and this agent's own.
  ClientActions OnLookAnswered(const std::optional<RunServer>& best, const RunServer& mine,
                               TimePoint now);
  // kHostHere's outcome (ClientOptions::host_failover): the walk goes on to this node's server.
  ClientActions OnHosted(const absl::Status& hosted, int port, TimePoint now);

  ConnectionState state() const { return state_; }
  uint64_t generation() const { return call_generation_; }
  const std::string& endpoint() const { return endpoint_; }
  const NodeInfo& node() const { return node_; }
  NodeInfo* mutable_node() { return &node_; }  // renamed for a rejoin (EventDelivery)
  bool ever_joined() const { return ever_joined_; }
  const ResumeClaim& claim() const { return claim_; }
  const std::string& member_key() const { return member_key_; }
  const std::string& former_key() const { return former_key_; }
  std::chrono::milliseconds heartbeat_interval() const { return heartbeat_interval_; }
  // keep_alive_max_attempt heartbeats (at least one), and the silence they span: fencing's
  // measure, and the time a successor gets to take the run.
  int LeaseAttempts() const;
  Duration Lease() const;

 private:
  static std::chrono::milliseconds Millis(Duration d);
  bool Closed() const { return state_ == ConnectionState::kClosed; }
  bool Joined() const { return state_ == ConnectionState::kJoined; }
  bool Reconnecting() const;  // kReconnecting, kServerDown or kFailingOver

  void Close(absl::Status status, std::optional<HangNotice> hang = std::nullopt);
  void StartCall(std::chrono::milliseconds budget, const char* budget_name, TimePoint now);
  void RetireCall();
  void OnJoined(const ServerWord& word, TimePoint now);
  void OnAssigned(const ServerWord& word);
  void OnBrokenAfterJoin(const StreamEnd& end, TimePoint now);
  void OnEndedBeforeJoin(const StreamEnd& end, TimePoint now);
  std::chrono::milliseconds NextBackoff();
  void RetryJoin(const std::string& why, TimePoint now);
  void RetryJoinNow(TimePoint now);
  void Reconnect(const std::string& why, TimePoint now);
  void ReconnectNow(TimePoint now);
  void ProbeHost(const Wake& wake, TimePoint now);
  void DecideFailover(const Wake& wake, ProbeResult probe, TimePoint now);
  void StartFailover(const std::string& why, bool host_refused, TimePoint now);
  void AdvanceFailover(TimePoint now);
  void CallCandidate(const Successor& next, int port, TimePoint now);
  bool FailsOverOnSilence() const;
  void RememberMembers(const std::vector<Successor>& members);
  void ScheduleHeartbeat(TimePoint now);
  void Heartbeat(TimePoint now);
  void JudgeSilence(TimePoint now);
  void JudgeProbedSilence(ProbeResult probe, TimePoint judged_at, TimePoint now);
  void Fence(const std::string& why, TimePoint now);
  void JoinAsNewNode(TimePoint now);
  void MaybeLookForTheRun(TimePoint now);
  void FollowServedRun(const RunServer& other, const RunServer& mine, TimePoint now);
  void Do(ClientAction action) { out_.push_back(std::move(action)); }
  void Tell(ClientAction::Type type, std::string message);
  ClientActions Flush();

  const ConnectionConfig config_;
  ConnectionState state_ = ConnectionState::kIdle;
  ClientActions out_;  // what the current event decided

  NodeInfo node_;
  std::string endpoint_;  // the server's address: config_.endpoint, a successor, another host
  // Not states but facts the decisions read: which of the client's resources exist (a current
  // call, the two cancellable timers), what ended the current call, what the server said.
  bool has_call_ = false;  // a kStartCall not yet retired
  uint64_t call_generation_ = 0;
  bool budget_cut_ = false;           // the read timeout cancelled the current call (not a break)
  bool ever_joined_ = false;          // re-registrations carry claim_
  bool read_armed_ = false;           // a kReadTimeout wake is pending
  bool heartbeat_armed_ = false;      // a kHeartbeat wake is pending
  uint64_t liveness_generation_ = 0;  // of the last kStartLiveness
  std::chrono::milliseconds heartbeat_interval_;  // ours, or the run's when that is shorter
  TimePoint last_heard_{};                        // the server's last message (fencing)
  int unanswered_ = 0;                            // heartbeats sent since then

  // The join's budget.
  std::chrono::milliseconds connect_budget_{0};
  const char* connect_budget_name_ = "read_timeout";
  TimePoint connect_deadline_{};
  std::string join_broken_because_;  // the last break of a join not yet acknowledged

  // Reconnecting.
  TimePoint reconnect_deadline_{};  // read_timeout after the break
  int reconnect_attempts_ = 0;
  std::string broken_because_;  // how the stream broke, for the final message

  // The run's server and its successors.
  bool server_embedded_ = false;
  std::string host_node_id_;
  std::vector<Successor> successors_;       // from the last assignment
  std::vector<Successor> earlier_members_;  // of earlier rounds, newest first
  std::vector<Successor> failover_candidates_;
  size_t failover_next_ = 0;
  TimePoint candidate_deadline_{};

  // What this node knows of its place, and the keys that prove it.
  ResumeClaim claim_;
  std::string member_key_;
  std::string former_key_;

  // Looking for the other side of a healed partition while hosting.
  TimePoint waiting_since_{};  // the workers were last stopped (no round to run)
  TimePoint last_look_{};
  bool looking_ = false;  // a kLookForTheRun is out
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_CLIENT_CONNECTION_STATE_H_
