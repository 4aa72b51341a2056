// A long randomized test of the rendezvous state machine: seeded random sequences of joins
// (some with disagreeing options or explicit ranks), heartbeats, worker-group reports (current,
// stale and future rounds), leaves, broken streams and time passing, with the invariants checked
// after every step. Bounded in wall time; a failure prints the seed and step to replay.
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "gtest/gtest.h"
#include "rendezvous/server_state.h"
#include "tests/rendezvous/state_test_util.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;

struct Params {
  int min_nodes;
  int max_nodes;
  int nproc;
  int max_restarts;
};

class Driver {
 public:
  Driver(uint32_t seed, Params p) : rng_(seed), p_(p) {}

  // Runs `steps` random events; returns false (after recording a gtest failure) on a violation.
  bool Run(int steps) {
    for (step_ = 0; step_ < steps; ++step_) {
      Outbox out = RandomEvent();
      if (!Check(out)) return false;
    }
    return true;
  }

  int assignments_seen() const { return assignments_seen_; }
  int rounds_seen() const { return rounds_seen_; }
  int restarts_seen() const { return restarts_seen_; }

 private:
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  ConnId PickLive() {
    if (live_.empty()) return 0;
    auto it = live_.begin();
    std::advance(it, Uniform(0, static_cast<int>(live_.size()) - 1));
    return *it;
  }

  Outbox RandomEvent() {
    const int kind = Uniform(0, 99);
    const TimePoint now = clock_.Now();
    if (kind < 18 || live_.empty()) {
      ConnId conn = next_conn_++;
      JoinRequest r = testing::MakeJoin("run", "n" + std::to_string(conn), p_.min_nodes,
                                        p_.max_nodes, p_.nproc, p_.max_restarts);
      r.timeouts.last_call_timeout = milliseconds(Uniform(0, 1) * 500);
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
    if (kind < 45) return state_.Heartbeat(conn, now);
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
      if (Uniform(0, 9) > 0) state_.Heartbeat(c, clock_.Now());
    }
    Outbox out = state_.Tick(clock_.Now());
    ticked_ = true;
    return out;
  }

#define CHECK_OR_FAIL(cond, what)                                                           \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      ADD_FAILURE() << "invariant violated at step " << step_ << ": " << what << " (" #cond \
                    << ")";                                                                 \
      return false;                                                                         \
    }                                                                                       \
  } while (0)

  bool Check(const Outbox& out) {
    std::map<int64_t, std::vector<std::pair<ConnId, Assignment>>> by_round;
    for (const Outgoing& o : out) {
      CHECK_OR_FAIL(closed_.count(o.conn) == 0 || std::holds_alternative<CloseNotice>(o.msg),
                    "message to closed stream " << o.conn);
      if (const auto* a = std::get_if<Assignment>(&o.msg)) {
        by_round[a->round].push_back({o.conn, *a});
        CHECK_OR_FAIL(a->round > conn_round_[o.conn], "round went backwards for a stream");
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
    CHECK_OR_FAIL(by_round.size() <= 1, "assignments for several rounds in one step");
    for (const auto& [round, members] : by_round) {
      const int n = static_cast<int>(members.size());
      CHECK_OR_FAIL(round > last_round_, "round " << round << " after " << last_round_);
      last_round_ = round;
      ++rounds_seen_;
      assignments_seen_ += n;
      CHECK_OR_FAIL(n >= p_.min_nodes && n <= p_.max_nodes, "round of " << n << " nodes");
      std::set<int> ranks;
      std::set<std::string> masters;
      for (const auto& [conn, a] : members) {
        ranks.insert(a.group_rank);
        masters.insert(a.master_addr + ":" + std::to_string(a.master_port));
        CHECK_OR_FAIL(a.group_world_size == n, "group world size");
        CHECK_OR_FAIL(a.world_size == n * p_.nproc, "world size");
        CHECK_OR_FAIL(a.rank_offset == a.group_rank * p_.nproc, "rank offset");
        CHECK_OR_FAIL(a.restart_count <= p_.max_restarts, "restart count over budget");
        CHECK_OR_FAIL(a.max_restarts == p_.max_restarts, "max restarts");
      }
      CHECK_OR_FAIL(static_cast<int>(ranks.size()) == n, "duplicate group ranks");
      CHECK_OR_FAIL(*ranks.begin() == 0 && *ranks.rbegin() == n - 1, "ranks not 0..n-1");
      CHECK_OR_FAIL(masters.size() == 1, "members disagree on the master");
    }
    if (status.ok()) {
      CHECK_OR_FAIL(status->restarts_used <= p_.max_restarts, "budget exceeded");
      CHECK_OR_FAIL(status->restarts_used >= last_restarts_, "budget went backwards");
      last_restarts_ = status->restarts_used;
      CHECK_OR_FAIL(status->round >= last_round_, "status round behind");
      std::set<int> ranks;
      int running = 0;
      for (const MemberStatus& m : status->members) {
        if (m.group_rank < 0) continue;
        ++running;
        CHECK_OR_FAIL(ranks.insert(m.group_rank).second, "duplicate rank in status");
      }
      CHECK_OR_FAIL(running <= p_.max_nodes, "more members than max");
      if (status->phase == RunPhase::kRunning) {
        CHECK_OR_FAIL(running >= 1, "running round without members");
      }
    }
    if (ticked_) {
      ticked_ = false;
      std::optional<TimePoint> next = state_.NextDeadline();
      CHECK_OR_FAIL(!next || *next > clock_.Now(), "Tick left due work behind");
    }
    return true;
  }

  std::mt19937 rng_;
  const Params p_;
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

TEST(RandomEventsTest, InvariantsHoldForArbitraryEventSequences) {
  const auto start = std::chrono::steady_clock::now();
  const auto budget = std::chrono::seconds(12);
  int seeds = 0, rounds = 0, assignments = 0, restarts = 0;
  for (uint32_t seed = 1; seed <= 6000; ++seed) {
    std::mt19937 pick(seed);
    Params p;
    p.min_nodes = std::uniform_int_distribution<int>(1, 4)(pick);
    p.max_nodes = p.min_nodes + std::uniform_int_distribution<int>(0, 4)(pick);
    p.nproc = std::uniform_int_distribution<int>(1, 3)(pick);
    p.max_restarts = std::uniform_int_distribution<int>(0, 5)(pick);
    Driver driver(seed, p);
    ASSERT_TRUE(driver.Run(3000)) << "seed " << seed << " nnodes " << p.min_nodes << ":"
                                  << p.max_nodes << " max_restarts " << p.max_restarts;
    ++seeds;
    rounds += driver.rounds_seen();
    assignments += driver.assignments_seen();
    restarts += driver.restarts_seen();
    if (std::chrono::steady_clock::now() - start > budget) break;
  }
  // The generator must actually exercise the machine, or the invariants prove nothing.
  EXPECT_GT(seeds, 20);
  EXPECT_GT(rounds, 5 * seeds);
  EXPECT_GT(restarts, seeds);
  RecordProperty("seeds", seeds);
  std::printf("seeds=%d rounds=%d assignments=%d restarts=%d\n", seeds, rounds, assignments,
              restarts);
}

}  // namespace
}  // namespace ddprun::rendezvous
