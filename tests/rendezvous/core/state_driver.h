// StateDriver: drives a ServerState with arbitrary event sequences (joins, some with disagreeing
// options, explicit or duplicate ranks and node ids; heartbeats; group status for current,
// stale and future rounds; leaves; broken streams; timeline steps, recoveries among them, with
// garbage fields; time passing) and checks the state machine's
// invariants after every step. The choices come from a caller-supplied source, so the same
// driver serves the seeded randomized test and the libFuzzer target. No gtest dependency.
#ifndef DDPRUN_TESTS_RENDEZVOUS_CORE_STATE_DRIVER_H_
#define DDPRUN_TESTS_RENDEZVOUS_CORE_STATE_DRIVER_H_

#include <chrono>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "rendezvous/core/server_state.h"
#include "rendezvous/core/status_page.h"
#include "tests/rendezvous/core/state_test_util.h"

namespace ddprun::rendezvous::testing {

struct DriverParams {
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc = 1;
  int max_restarts = 0;
};

class StateDriver {
 public:
  // `uniform(lo, hi)`: a choice in [lo, hi].
  using Source = std::function<int(int lo, int hi)>;

  StateDriver(DriverParams p, Source uniform) : p_(p), uniform_(std::move(uniform)) {}

  // One event; returns "" or a description of the violated invariant.
  std::string Step() { return Check(RandomEvent()); }

  int assignments_seen() const { return assignments_seen_; }
  int rounds_seen() const { return rounds_seen_; }
  int restarts_seen() const { return restarts_seen_; }

 private:
  int Uniform(int lo, int hi) { return uniform_(lo, hi); }

  ConnId PickLive() {
    auto it = live_.begin();
    std::advance(it, Uniform(0, static_cast<int>(live_.size()) - 1));
    return *it;
  }

  Outbox RandomEvent() {
    using std::chrono::milliseconds;
    const int kind = Uniform(0, 99);
    const TimePoint now = clock_.Now();
    if (kind < 18 || live_.empty()) {
      ConnId conn = next_conn_++;
      JoinRequest r = MakeJoin("run", "n" + std::to_string(conn), p_.min_nodes, p_.max_nodes,
                               p_.nproc, p_.max_restarts);
      r.timeouts.last_call_timeout = milliseconds(Uniform(0, 1) * 500);
      // In-process agents' setting: the round after a failure forms without a last call.
      if (Uniform(0, 1) == 1) r.timeouts.failure_last_call_timeout = milliseconds(0);
      // Disagreeing options only for an existing run, so that the run's own options are p_.
      const int variant = state_.Status("run").ok() ? Uniform(0, 19) : 19;
      if (variant == 0) r.node.nproc_per_node = p_.nproc + 1;
      if (variant == 1) r.node.max_nodes = p_.max_nodes + 1;
      if (variant == 2) r.node.max_restarts = p_.max_restarts + 1;
      if (variant == 3 || variant == 4) r.node.requested_node_rank = Uniform(0, p_.max_nodes);
      if (variant == 5) r.node.node_id = "n1";  // maybe a duplicate
      live_.insert(conn);
      return state_.Join(conn, r, now);
    }
    const ConnId conn = PickLive();
    if (kind < 40) return state_.Heartbeat(conn, {}, now);
    if (kind < 45) return state_.Step(conn, RandomStepLine(), now);  // renews the lease too
    if (kind < 60) {
      const int64_t round = last_round_ + Uniform(-1, 1);
      const int s = Uniform(0, 9);
      const GroupState gs = s < 5   ? GroupState::kRunning
                            : s < 7 ? GroupState::kSucceeded
                                    : GroupState::kFailed;
      WorkerFailure f;
      f.hostname = "h";
      f.exit_code = 1;
      return state_.GroupStatus(conn, round, gs, f, now);
    }
    if (kind < 65) {
      live_.erase(conn);
      return state_.Leave(conn, "bye", now);
    }
    if (kind < 72) {
      live_.erase(conn);
      return state_.StreamBroken(conn, now);
    }
    // Time passes; everyone but a random few heartbeats first.
    clock_.Advance(milliseconds(Uniform(0, 2500)));
    for (ConnId c : live_) {
      if (Uniform(0, 9) > 0) state_.Heartbeat(c, {}, clock_.Now());
    }
    ticked_ = true;
    return state_.Tick(clock_.Now());
  }

  // A timeline step as an agent might send it: often a "recovered" one (recovery_ledger.h),
  // with fields of the right type, the wrong one, out of bounds, or cut short.
  std::string RandomStepLine() {
    static const char* const kValues[] = {"0",
                                          "12",
                                          "-5",
                                          "1e300",
                                          "\"7\"",
                                          "null",
                                          "[1]",
                                          "2.5",
                                          "0.9",
                                          "1.5",
                                          "{}",
                                          "true",
                                          "18446744073709551615"};
    static const char* const kKeys[] = {
        "round",    "mode",       "cause",         "detect_ms",  "stop_ms",       "rendezvous_ms",
        "start_ms", "restore_ms", "first_step_ms", "steps_lost", "restored_step", "effective_ratio",
        "node",     "ts_ms"};
    static const char* const kStrings[] = {"\"in-process\"", "\"cold\"", "\"hang\"",
                                           "\"worker_exit\"", "\"<b>\\\"\\n\""};
    std::string line = Uniform(0, 3) == 0 ? R"({"step":"closed")" : R"({"step":"recovered")";
    const int fields = Uniform(0, 8);
    for (int i = 0; i < fields; ++i) {
      const char* key = kKeys[Uniform(0, static_cast<int>(std::size(kKeys)) - 1)];
      const char* value = Uniform(0, 2) == 0
                              ? kStrings[Uniform(0, static_cast<int>(std::size(kStrings)) - 1)]
                              : kValues[Uniform(0, static_cast<int>(std::size(kValues)) - 1)];
      line += std::string(",\"") + key + "\":" + value;
    }
    line += "}";
    if (Uniform(0, 9) == 0) line.resize(Uniform(0, static_cast<int>(line.size())));
    return line;
  }

#define DDPRUN_DRIVER_CHECK(cond, what)                        \
  do {                                                         \
    if (!(cond)) {                                             \
      std::ostringstream s;                                    \
      s << "step " << step_ << ": " << what << " (" #cond ")"; \
      return s.str();                                          \
    }                                                          \
  } while (0)

  std::string Check(const Outbox& out) {
    ++step_;
    std::map<int64_t, std::vector<std::pair<ConnId, Assignment>>> by_round;
    for (const Outgoing& o : out) {
      DDPRUN_DRIVER_CHECK(closed_.count(o.conn) == 0 || std::holds_alternative<CloseNotice>(o.msg),
                          "message to closed stream " << o.conn);
      if (const auto* a = std::get_if<Assignment>(&o.msg)) {
        by_round[a->round].push_back({o.conn, *a});
        DDPRUN_DRIVER_CHECK(a->round > conn_round_[o.conn], "round went backwards for a stream");
        conn_round_[o.conn] = a->round;
      } else if (std::holds_alternative<CloseNotice>(o.msg)) {
        closed_.insert(o.conn);
        live_.erase(o.conn);
      } else if (std::holds_alternative<RestartNotice>(o.msg)) {
        ++restarts_seen_;
      }
    }
    absl::StatusOr<RunStatus> status = state_.Status("run");
    if (!status.ok()) {
      // The run was forgotten (everyone gone): a new incarnation starts from round 0.
      last_round_ = 0;
      last_restarts_ = 0;
    }
    DDPRUN_DRIVER_CHECK(by_round.size() <= 1, "assignments for several rounds in one step");
    for (const auto& [round, members] : by_round) {
      const int n = static_cast<int>(members.size());
      DDPRUN_DRIVER_CHECK(round > last_round_, "round " << round << " after " << last_round_);
      last_round_ = round;
      ++rounds_seen_;
      assignments_seen_ += n;
      DDPRUN_DRIVER_CHECK(n >= p_.min_nodes && n <= p_.max_nodes, "round of " << n << " nodes");
      std::set<int> ranks;
      std::set<std::string> masters;
      for (const auto& [conn, a] : members) {
        ranks.insert(a.group_rank);
        masters.insert(a.master_addr + ":" + std::to_string(a.master_port));
        DDPRUN_DRIVER_CHECK(a.group_world_size == n, "group world size");
        DDPRUN_DRIVER_CHECK(a.world_size == n * p_.nproc, "world size");
        DDPRUN_DRIVER_CHECK(a.rank_offset == a.group_rank * p_.nproc, "rank offset");
        DDPRUN_DRIVER_CHECK(a.restart_count <= p_.max_restarts, "restart count over budget");
        DDPRUN_DRIVER_CHECK(a.max_restarts == p_.max_restarts, "max restarts");
      }
      DDPRUN_DRIVER_CHECK(static_cast<int>(ranks.size()) == n, "duplicate group ranks");
      DDPRUN_DRIVER_CHECK(*ranks.begin() == 0 && *ranks.rbegin() == n - 1, "ranks not 0..n-1");
      DDPRUN_DRIVER_CHECK(masters.size() == 1, "members disagree on the master");
    }
    if (status.ok()) {
      DDPRUN_DRIVER_CHECK(status->restarts_used <= p_.max_restarts, "budget exceeded");
      DDPRUN_DRIVER_CHECK(status->restarts_used >= last_restarts_, "budget went backwards");
      last_restarts_ = status->restarts_used;
      DDPRUN_DRIVER_CHECK(status->round >= last_round_, "status round behind");
      std::set<int> ranks;
      int running = 0;
      for (const MemberStatus& m : status->members) {
        if (m.group_rank < 0) continue;
        ++running;
        DDPRUN_DRIVER_CHECK(ranks.insert(m.group_rank).second, "duplicate rank in status");
      }
      DDPRUN_DRIVER_CHECK(running <= p_.max_nodes, "more members than max");
      if (status->phase == RunPhase::kRunning) {
        DDPRUN_DRIVER_CHECK(running >= 1, "running round without members");
      }
    }
    DDPRUN_DRIVER_CHECK(state_.metrics().recoveries.size() <= state_.num_runs(),
                        "recoveries of a forgotten run kept");
    for (const auto& [id, ledger] : state_.metrics().recoveries) {
      DDPRUN_DRIVER_CHECK(ledger.latest().size() <= kMaxRecoveryRecords, "recoveries unbounded");
    }
    if (step_ % 16 == 0) {  // what an agent sent must never break a scrape or the page
      const std::string metrics = FormatMetrics(state_.metrics(), state_.AllStatus(false));
      const std::string page =
          RenderStatusPage(state_.AllStatus(true), state_.metrics(), "h:1", clock_.Now());
      DDPRUN_DRIVER_CHECK(page.find("<b>") == std::string::npos, "unescaped step on the page");
      DDPRUN_DRIVER_CHECK(metrics.find("\n\"") == std::string::npos, "unescaped label value");
    }
    if (ticked_) {
      ticked_ = false;
      std::optional<TimePoint> next = state_.NextDeadline();
      DDPRUN_DRIVER_CHECK(!next || *next > clock_.Now(), "Tick left due work behind");
    }
    return "";
  }
#undef DDPRUN_DRIVER_CHECK

  const DriverParams p_;
  Source uniform_;
  FakeClock clock_;
  ServerState state_;
  int step_ = 0;
  ConnId next_conn_ = 1;
  std::set<ConnId> live_;
  std::set<ConnId> closed_;
  std::map<ConnId, int64_t> conn_round_;
  int64_t last_round_ = 0;
  int last_restarts_ = 0;
  bool ticked_ = false;
  int assignments_seen_ = 0;
  int rounds_seen_ = 0;
  int restarts_seen_ = 0;
};

}  // namespace ddprun::rendezvous::testing

#endif  // DDPRUN_TESTS_RENDEZVOUS_CORE_STATE_DRIVER_H_
