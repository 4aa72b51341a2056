// The preflight in the server's state (issue 41, point 1): the first round waits for every node's
// measurements; a slow node is kept out while a spare can take its place, else the job starts
// with it and says so; a node that never reports is named at the deadline; later rounds have no
// preflight.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "rendezvous/core/server_metrics.h"
#include "rendezvous/core/status_page.h"
#include "tests/rendezvous/core/state_fixture.h"
#include "tests/rendezvous/core/state_test_util.h"

namespace ddprun::rendezvous {
namespace {

using ::testing::Contains;
using testing::Count;
using testing::Find;
using ::testing::HasSubstr;
using testing::MakeJoin;

class PreflightTest : public testing::ServerStateTest {
 protected:
  // Node `c` of a fixed run of 3 with the preflight on; its probe listener at 4000 + c.
  Outbox JoinNode(ConnId c, const std::string& peer_host = "") {
    JoinRequest r = MakeJoin("run", std::to_string(c), 3, 3);
    if (!peer_host.empty()) r.peer_host = peer_host;
    r.timeouts.preflight.enabled = true;
    r.node.preflight_port = 4000 + static_cast<int>(c);
    return Join(c, r);
  }
  // What node `c` measured: `gflops`, and to each target it was given the slower of the two
  // nodes' links (link_mbps_, 9000 where unset) both ways.
  Outbox Measured(ConnId c, const PreflightRequest& request, double gflops) {
    auto link = [this](const std::string& id) {
      auto it = link_mbps_.find(id);
      return it == link_mbps_.end() ? 9000.0 : it->second;
    };
    PreflightReport report;
    report.generation = request.generation;
    report.cpu_gflops = gflops;
    for (const PreflightPeer& t : request.targets) {
      const double mbps = std::min(link(std::to_string(c)), link(t.node_id));
      report.pairs.push_back({t.node_id, 0.05, mbps, mbps, ""});
    }
    return state_.Preflight(c, report, clock_.Now());
  }
  std::map<std::string, double> link_mbps_;
  // Joins nodes 1..n: the requests each was sent.
  std::map<ConnId, PreflightRequest> JoinAll(ConnId n) {
    std::map<ConnId, PreflightRequest> requests;
    for (ConnId c = 1; c <= n; ++c) {
      const Outbox out = JoinNode(c);
      EXPECT_EQ(Count<Assignment>(out), 0) << "no round before the preflight's verdicts";
      for (const Outgoing& o : out) {
        if (const auto* r = std::get_if<PreflightRequest>(&o.msg)) requests[o.conn] = *r;
      }
    }
    return requests;
  }
  const PreflightVerdict& VerdictOf(const std::string& node_id) {
    verdicts_ = Status().preflight->verdicts;
    for (const PreflightVerdict& v : verdicts_) {
      if (v.node_id == node_id) return v;
    }
    ADD_FAILURE() << "no verdict on " << node_id;
    return verdicts_.front();
  }
  std::vector<PreflightVerdict> verdicts_;
};

// Nodes set aside (issue 41, point 2): a node the preflight kept out measures again every
// requalify_interval (30 s here, the default) against the preflight's median node, and is a
// spare once it passes.
class RequalifyTest : public PreflightTest {
 protected:
  // Nodes 1..4 of a run of 3: the preflight keeps node 3 (0.4x the median's compute) out.
  void SetUp() override {
    std::map<ConnId, PreflightRequest> asked = JoinAll(4);
    for (ConnId c : {1, 2, 4}) Measured(c, asked[c], 10);
    const Outbox out = Measured(3, asked[3], 4);
    ASSERT_NE(Find<StandbyNotice>(out, 3), nullptr);
    ASSERT_EQ(Status().phase, RunPhase::kRunning);
    state_.TakeRunLog();
  }
  // `d` passes a second at a time, with every connected node but `silent` heartbeating: what
  // the ticks sent.
  Outbox Pass(Duration d, ConnId silent = 0) {
    Outbox all;
    for (Duration passed{}; passed < d; passed += std::chrono::seconds(1)) {
      clock_.Advance(std::chrono::seconds(1));
      for (ConnId c : conns_) {
        if (c != silent) state_.Heartbeat(c, {}, clock_.Now());
      }
      for (Outgoing& o : Tick()) all.push_back(std::move(o));
    }
    return all;
  }
  std::vector<ConnId> conns_ = {1, 2, 3, 4};
};

// The etcd backend's coordinator changes: in the RunState restored from the snapshot the node
// is still set aside (not a newcomer, not a spare), and the snapshot's median judges its next try.
TEST(RequalifySnapshotTest, ANodeSetAsideStaysSoAcrossACoordinatorChange) {
  FakeClock clock;
  auto join = [](ConnId id) {
    JoinRequest r = MakeJoin("run", std::to_string(id), 3, 3);
    r.timeouts.preflight.enabled = true;
    r.node.preflight_port = 4000 + static_cast<int>(id);
    return r;
  };
  RunState before(join(1), clock.Now());
  Outbox out;
  for (ConnId c = 1; c <= 4; ++c) before.Join(c, join(c), clock.Now(), &out);
  std::map<ConnId, int64_t> generation;
  for (const Outgoing& o : out) {
    if (const auto* r = std::get_if<PreflightRequest>(&o.msg)) generation[o.conn] = r->generation;
  }
  ASSERT_EQ(generation.size(), 4u);
  for (ConnId c = 1; c <= 4; ++c) {
    PreflightReport report;
    report.generation = generation[c];
    report.cpu_gflops = c == 3 ? 4 : 10;
    before.Preflight(c, report, clock.Now(), &out);
  }
  const RunSnapshot snapshot = before.Snapshot();
  ASSERT_TRUE(snapshot.preflight_median.has_value());
  EXPECT_DOUBLE_EQ(snapshot.preflight_median->cpu_gflops, 10);

  RunState after(join(1), clock.Now());
  Outbox rejoined;
  for (ConnId c = 1; c <= 4; ++c) after.Join(c + 10, join(c), clock.Now(), &rejoined);
  rejoined.clear();
  after.Restore(snapshot, clock.Now(), &rejoined);
  EXPECT_EQ(Count<StandbyNotice>(rejoined), 0) << "it was told already";
  EXPECT_EQ(Count<RestartNotice>(rejoined), 0) << "not a newcomer";
  const RunStatus restored = after.Status();
  EXPECT_EQ(restored.spares, 0);
  for (const MemberStatus& m : restored.members) {
    EXPECT_EQ(m.state, m.node_id == "3" ? "set aside" : "running") << m.node_id;
  }
  Outbox asked;
  for (int second = 0; second < 30; ++second) {
    clock.Advance(std::chrono::seconds(1));
    for (ConnId c = 11; c <= 14; ++c) after.Heartbeat(c, clock.Now());
    after.Tick(clock.Now(), &asked);
  }
  const PreflightRequest* ask = Find<PreflightRequest>(asked, 13);
  ASSERT_NE(ask, nullptr) << "asked again by the new coordinator";
  PreflightReport better;
  better.generation = ask->generation;
  better.cpu_gflops = 9.8;
  Outbox passed;
  after.Preflight(13, better, clock.Now(), &passed);
  const StandbyNotice* spare = Find<StandbyNotice>(passed, 13);
  ASSERT_NE(spare, nullptr);
  EXPECT_EQ(spare->set_aside, "");
  EXPECT_EQ(after.Status().spares, 1);
}

TEST_F(RequalifyTest, AKeptOutNodeMeasuresAgainAndIsASpareOnceItPasses) {
  EXPECT_EQ(Find<PreflightRequest>(Pass(std::chrono::seconds(29)), 3), nullptr);
  Outbox out = Pass(std::chrono::seconds(1));
  const PreflightRequest* ask = Find<PreflightRequest>(out, 3);
  ASSERT_NE(ask, nullptr) << "asked again after requalify_interval";
  ASSERT_EQ(ask->targets.size(), 2u);
  EXPECT_EQ(ask->targets[0].node_id, "1");  // no spare listens: the members, in arrival order
  EXPECT_EQ(ask->targets[0].port, 4001);
  const PreflightRequest first_try = *ask;

  out = Measured(3, first_try, 5);  // still 0.5x the median
  const StandbyNotice* still = Find<StandbyNotice>(out, 3);
  ASSERT_NE(still, nullptr);
  EXPECT_THAT(still->set_aside, HasSubstr("did not pass the preflight again: cpu 5 GFLOP/s, "
                                          "0.50x the job's median 10 GFLOP/s"));
  EXPECT_THAT(still->set_aside, HasSubstr("next try in 30 s"));
  EXPECT_THAT(state_.TakeRunLog(), Contains(HasSubstr("node 3 (host-3) stays set aside")));
  EXPECT_TRUE(Measured(3, first_try, 10).empty()) << "a second report of a try counts for nothing";
  EXPECT_EQ(Status().members.back().state, "set aside");
  EXPECT_EQ(Status().spares, 0);

  out = Pass(std::chrono::seconds(30));
  ask = Find<PreflightRequest>(out, 3);
  ASSERT_NE(ask, nullptr) << "asked again after the try it failed";
  EXPECT_GT(ask->generation, first_try.generation);
  out = Measured(3, *ask, 9.5);  // within the margin
  const StandbyNotice* spare = Find<StandbyNotice>(out, 3);
  ASSERT_NE(spare, nullptr);
  EXPECT_EQ(spare->set_aside, "") << "a spare now";
  EXPECT_EQ(spare->position, 0);
  EXPECT_EQ(Count<StandbyNotice>(out), 1) << "told once";
  EXPECT_EQ(Count<Assignment>(out), 0) << "the round is full: nobody restarts for a spare";
  EXPECT_THAT(state_.TakeRunLog(),
              Contains(HasSubstr("node 3 (host-3) passed the preflight again: cpu 9.5 GFLOP/s")));
  const RunStatus s = Status();
  EXPECT_EQ(s.spares, 1);
  EXPECT_EQ(s.members.back().state, "spare");
}

TEST_F(RequalifyTest, ATryWithoutAReportFailsAtTheDeadline) {
  ASSERT_NE(Find<PreflightRequest>(Pass(std::chrono::seconds(30)), 3), nullptr);
  const Outbox out = Pass(std::chrono::seconds(10));
  const StandbyNotice* still = Find<StandbyNotice>(out, 3);
  ASSERT_NE(still, nullptr);
  EXPECT_THAT(still->set_aside, HasSubstr("it sent no preflight report before the deadline"));
  EXPECT_EQ(Find<PreflightRequest>(Pass(std::chrono::seconds(29)), 3), nullptr);
  EXPECT_NE(Find<PreflightRequest>(Pass(std::chrono::seconds(1)), 3), nullptr);
}

TEST_F(RequalifyTest, ANodeThatPassesIsTakenIntoARoundThatLacksIt) {
  // Member 1 is lost: the fixed run of 3 has only two nodes to form a round with.
  Outbox out = state_.StreamBroken(1, clock_.Now());
  conns_ = {2, 3, 4};
  EXPECT_EQ(Count<Assignment>(out), 0) << "a node set aside takes no place";
  EXPECT_EQ(Status().phase, RunPhase::kJoining);
  out = Pass(std::chrono::seconds(30));
  const PreflightRequest* ask = Find<PreflightRequest>(out, 3);
  ASSERT_NE(ask, nullptr);
  out = Measured(3, *ask, 10);
  const Assignment* a = Find<Assignment>(out, 3);
  ASSERT_NE(a, nullptr) << "passed, it completes the round";
  EXPECT_EQ(a->group_world_size, 3);
  // Told first that it is set aside no more: a re-registration before the assignment (a server
  // lost meanwhile) claims it a spare, not set aside.
  const auto told = std::find_if(out.begin(), out.end(), [](const Outgoing& o) {
    return o.conn == 3 && std::holds_alternative<StandbyNotice>(o.msg);
  });
  ASSERT_NE(told, out.end());
  EXPECT_EQ(std::get<StandbyNotice>(told->msg).set_aside, "");
  EXPECT_TRUE(std::any_of(told, out.end(), [](const Outgoing& o) {
    return o.conn == 3 && std::holds_alternative<Assignment>(o.msg);
  })) << "the assignment after it";
}

TEST_F(RequalifyTest, ANodeSetAsideThatReconnectsIsStillSetAside) {
  state_.StreamBroken(3, clock_.Now());
  EXPECT_EQ(Status().members.size(), 3u);
  JoinRequest again = MakeJoin("run", "3", 3, 3);
  again.timeouts.preflight.enabled = true;
  const Outbox out = Join(5, again);
  const StandbyNotice* aside = Find<StandbyNotice>(out, 5);
  ASSERT_NE(aside, nullptr);
  EXPECT_THAT(aside->set_aside, HasSubstr("kept out by the preflight"));
  EXPECT_EQ(Status().spares, 0);
  // Rejoining as a new node (after fencing) names its former id: still set aside.
  state_.StreamBroken(5, clock_.Now());
  JoinRequest renamed = MakeJoin("run", "3-again", 3, 3);
  renamed.timeouts.preflight.enabled = true;
  renamed.node.formerly_node_id = "3";
  const Outbox rejoined = Join(6, renamed);
  const StandbyNotice* still = Find<StandbyNotice>(rejoined, 6);
  ASSERT_NE(still, nullptr);
  EXPECT_THAT(still->set_aside, HasSubstr("kept out by the preflight"));
  EXPECT_EQ(Status().spares, 0);
}

TEST_F(PreflightTest, ASlowNodeIsKeptOutAndTheSpareThatJoinedMeanwhileTakesItsPlace) {
  std::map<ConnId, PreflightRequest> asked = JoinAll(4);  // node 4 arrives during the preflight
  ASSERT_EQ(asked.size(), 4u) << "the late node is measured too";
  EXPECT_EQ(asked[1].targets.size(), 2u);
  ASSERT_TRUE(Status().preflight.has_value());
  EXPECT_TRUE(Status().preflight->running);
  clock_.Advance(std::chrono::milliseconds(900));
  Outbox out;
  for (ConnId c : {1, 2, 4}) {
    out = Measured(c, asked[c], 10);
    EXPECT_EQ(Count<Assignment>(out), 0) << "node 3 has not reported";
  }
  out = Measured(3, asked[3], 4);  // 0.4x the median: slow
  EXPECT_EQ(Find<CloseNotice>(out, 3), nullptr) << "set aside, not closed out";
  const StandbyNotice* aside = Find<StandbyNotice>(out, 3);
  ASSERT_NE(aside, nullptr);
  EXPECT_THAT(aside->set_aside, HasSubstr("kept out by the preflight: cpu 4 GFLOP/s"));
  EXPECT_EQ(Find<Assignment>(out, 3), nullptr);
  for (ConnId c : {1, 2, 4}) ASSERT_NE(Find<Assignment>(out, c), nullptr) << c;
  EXPECT_EQ(Find<Assignment>(out, 4)->group_world_size, 3);
  const RunStatus s = Status();
  EXPECT_EQ(s.phase, RunPhase::kRunning);
  EXPECT_EQ(s.spares, 0) << "a node set aside is no spare";
  ASSERT_EQ(s.members.size(), 4u);
  EXPECT_EQ(s.members.back().node_id, "3");
  EXPECT_EQ(s.members.back().state, "set aside");
  ASSERT_TRUE(s.preflight.has_value());
  EXPECT_FALSE(s.preflight->running);
  EXPECT_NEAR(s.preflight->took_s, 0.9, 1e-9);
  EXPECT_TRUE(VerdictOf("3").kept_out);
  EXPECT_FALSE(VerdictOf("4").slow());
  const std::vector<std::string> log = state_.TakeRunLog();
  EXPECT_THAT(log, Contains(HasSubstr("node 3 (host-3): cpu 4 GFLOP/s (0.40x)")));
  EXPECT_THAT(log, Contains(HasSubstr("(kept out: a spare takes its place)")));
}

TEST_F(PreflightTest, TheVerdictsAreOnMetricsAndTheStatusPage) {
  std::map<ConnId, PreflightRequest> asked = JoinAll(4);
  clock_.Advance(std::chrono::milliseconds(1500));
  for (ConnId c : {1, 2, 4}) Measured(c, asked[c], 10);
  Measured(3, asked[3], 4);
  const RunStatus run = Status();
  const std::string text = FormatMetrics(ServerMetrics(), {run});
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_preflight_seconds{run_id=\"run\"} 1.5\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_preflight_slow_nodes{run_id=\"run\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_preflight_kept_out_nodes{run_id=\"run\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("ddprun_rdzv_preflight_worst_ratio{run_id=\"run\",node=\"3\"} 0.4\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_preflight_worst_ratio{run_id=\"run\",node=\"1\"} 1\n"));
  const std::string page = RenderStatusPage({run}, ServerMetrics(), "h:1", clock_.Now());
  EXPECT_THAT(page, HasSubstr("<summary>preflight (1.5 s)</summary>"));
  EXPECT_THAT(page, HasSubstr("<tr class=\"slow\"><td>host-3</td><td>4 (0.40x)</td>"));
  EXPECT_THAT(page, HasSubstr("kept out: cpu 4 GFLOP/s, 0.40x the job&#39;s median 10 GFLOP/s"));
}

TEST_F(PreflightTest, WithoutASpareTheJobStartsWithTheSlowNodeAndSaysSo) {
  std::map<ConnId, PreflightRequest> asked = JoinAll(3);
  link_mbps_["3"] = 450;  // its link, at a twentieth
  Measured(1, asked[1], 10);
  Measured(2, asked[2], 10);
  const Outbox out = Measured(3, asked[3], 10);
  EXPECT_EQ(Count<Assignment>(out), 3);
  EXPECT_EQ(Count<CloseNotice>(out), 0);
  EXPECT_TRUE(VerdictOf("3").slow());
  EXPECT_FALSE(VerdictOf("3").kept_out);
  EXPECT_THAT(state_.TakeRunLog(),
              Contains(HasSubstr("1 slow node(s) and no spare to take their places: the job "
                                 "starts with them")));
}

TEST_F(PreflightTest, ANodeThatNeverReportsIsNamedAtTheDeadline) {
  std::map<ConnId, PreflightRequest> asked = JoinAll(3);
  Measured(1, asked[1], 10);
  Measured(2, asked[2], 10);
  for (int s = 0; s < 9; ++s) {  // the leases kept fresh: only the preflight's deadline counts
    clock_.Advance(std::chrono::seconds(1));
    Beat({1, 2, 3});
    EXPECT_EQ(Count<Assignment>(Tick()), 0);
  }
  clock_.Advance(std::chrono::milliseconds(900));
  Beat({1, 2, 3});
  EXPECT_EQ(Count<Assignment>(Tick()), 0);
  EXPECT_LE(*state_.NextDeadline(), clock_.Now() + std::chrono::milliseconds(100));
  clock_.Advance(std::chrono::milliseconds(100));
  EXPECT_EQ(Count<Assignment>(Tick()), 3) << "10 s after the requests";
  EXPECT_FALSE(VerdictOf("3").reported);
  EXPECT_THAT(VerdictOf("3").shortfalls, Contains(HasSubstr("no preflight report")));
}

TEST_F(PreflightTest, ANodeOnLoopbackIsProbedAtItsHostNameWhenItsPeersAreRemote) {
  // The agent that hosts the server reached it through 127.0.0.1: its peers must not probe
  // their own loopback.
  JoinNode(1, "127.0.0.1");
  JoinNode(2);
  std::optional<PreflightRequest> asked;
  for (const Outgoing& o : JoinNode(3)) {
    if (const auto* r = std::get_if<PreflightRequest>(&o.msg); r != nullptr && o.conn == 3) {
      asked = *r;
    }
  }
  ASSERT_TRUE(asked.has_value());
  ASSERT_EQ(asked->targets.size(), 2u);  // 3 probes 1, then 2
  EXPECT_EQ(asked->targets[0].node_id, "1");
  EXPECT_EQ(asked->targets[0].addr, "host-1");
  EXPECT_EQ(asked->targets[1].addr, "10.0.0.2");
}

TEST_F(PreflightTest, OnlyTheFirstRoundHasAPreflight) {
  std::map<ConnId, PreflightRequest> asked = JoinAll(3);
  for (ConnId c : {1, 2, 3}) Measured(c, asked[c], 10);
  ASSERT_EQ(Status().round, 1);
  WorkerFailure f;
  f.hostname = "host-1";
  f.exit_code = 1;
  const Outbox out = state_.GroupStatus(1, 1, GroupState::kFailed, f, clock_.Now());
  EXPECT_EQ(Count<PreflightRequest>(out), 0);
  EXPECT_EQ(Count<Assignment>(out), 3) << "round 2 forms at once";
}

TEST_F(PreflightTest, ALateOrForeignReportIsIgnored) {
  std::map<ConnId, PreflightRequest> asked = JoinAll(3);
  PreflightRequest stale = asked[1];
  stale.generation += 5;
  EXPECT_TRUE(Measured(1, stale, 10).empty());
  for (ConnId c : {1, 2, 3}) Measured(c, asked[c], 10);
  EXPECT_TRUE(Measured(1, asked[1], 1).empty()) << "after the verdicts: nothing changes";
  EXPECT_FALSE(VerdictOf("1").slow());
}

}  // namespace
}  // namespace ddprun::rendezvous
