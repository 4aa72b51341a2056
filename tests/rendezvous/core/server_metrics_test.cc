#include "rendezvous/core/server_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "rendezvous/core/server_state.h"
#include "rendezvous/core/status_page.h"

namespace ddprun::rendezvous {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(HistogramTest, BucketsAreCumulativeWithSumAndCount) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 20.0}) h.Observe(v);
  std::string out;
  h.Render("lat", &out);
  EXPECT_EQ(out,
            "lat_bucket{le=\"0.1\"} 2\nlat_bucket{le=\"1\"} 3\nlat_bucket{le=\"10\"} 3\n"
            "lat_bucket{le=\"+Inf\"} 4\nlat_sum 20.65\nlat_count 4\n");
}

TEST(ServerMetricsTest, RunsRestartsAndRefusalsAreRendered) {
  ServerMetrics m;
  m.heartbeats = 7;
  m.refused["unauthenticated"] = 2;
  m.Add({RoundTiming{0.004, std::nullopt}, RoundTiming{0.02, 0.5}},
        {Cause::kWorkerFailure, Cause::kNodeJoined});
  RunStatus run;
  run.run_id = "job \"7\"\n";  // escaped as a label value
  run.round = 3;
  run.num_nodes = 4;
  run.phase = RunPhase::kRunning;
  run.restarts_used = 1;
  run.max_restarts = 3;
  const std::string text = FormatMetrics(m, {run});
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_runs 1\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_run_nodes{run_id=\"job \\\"7\\\"\\n\"} 4\n"));
  EXPECT_THAT(text,
              HasSubstr("ddprun_rdzv_run_phase{run_id=\"job \\\"7\\\"\\n\",phase=\"running\"} 1"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_restarts_total{cause=\"worker_failure\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_restarts_total{cause=\"hang\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_heartbeats_total 7\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_refused_total{reason=\"unauthenticated\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_round_completion_seconds_count 2\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_failure_to_restart_seconds_count 1\n"));
  // Every family is announced once, before its samples.
  EXPECT_EQ(text.find("# TYPE ddprun_rdzv_runs gauge"), text.find("# TYPE"));
}

// Issue 25: worker failures by the cause the agent found in the kernel's evidence, counted by
// the server from the agents' reports; a cause the server does not know is no new label.
TEST(ServerMetricsTest, WorkerFailuresAreCountedByTheirCause) {
  ServerState state;
  auto join = [&](ConnId conn) {
    JoinRequest r;
    r.node.run_id = "run";
    r.node.node_id = std::to_string(conn);
    r.node.min_nodes = r.node.max_nodes = 1;
    r.node.nproc_per_node = 1;
    r.node.max_restarts = 10;
    state.Join(conn, r, TimePoint{});
  };
  join(1);
  WorkerFailure oom;
  oom.signal = 9;
  oom.cause_kind = Cause::kOomKill;
  oom.cause = "killed by the OOM killer: memory cgroup limit 64.0 GiB reached";
  int64_t round = 1;
  state.GroupStatus(1, round++, GroupState::kFailed, oom, TimePoint{});
  WorkerFailure forged = oom;
  forged.cause_kind = Cause::kNodeJoined;  // not a death cause: counted as the report shows
  state.Tick(TimePoint{} + std::chrono::seconds(1));
  state.GroupStatus(1, round++, GroupState::kFailed, forged, TimePoint{} + std::chrono::seconds(1));
  WorkerFailure exited;
  exited.exit_code = 3;
  state.Tick(TimePoint{} + std::chrono::seconds(2));
  state.GroupStatus(1, round++, GroupState::kFailed, exited, TimePoint{} + std::chrono::seconds(2));
  const std::string text = FormatMetrics(state.metrics(), {});
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_worker_failures_total{cause=\"oom_kill\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_worker_failures_total{cause=\"unknown\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_worker_failures_total{cause=\"exit\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_worker_failures_total{cause=\"gpu_error\"} 0\n"));
  EXPECT_THAT(text, Not(HasSubstr("forged")));
  EXPECT_THAT(text, Not(HasSubstr("worker_failures_total{cause=\"node_joined\"}")));
}

// Round 1's restart 3 s before `now`: node n3 lost, the next round formed 4.2 ms later.
RestartRecord LostNodeRestart(TimePoint now, Cause cause) {
  RestartRecord r;
  r.when = now - std::chrono::seconds(3);
  r.round = 1;
  r.cause = cause;
  r.reason = "node n3 was lost";
  r.formed_after_s = 0.0042;
  return r;
}

TEST(StatusPageTest, EscapesWhatAgentsSentAndCapsHugeRuns) {
  RunStatus run;
  run.run_id = "<script>alert(1)</script>";
  run.phase = RunPhase::kRunning;
  for (int i = 0; i < 300; ++i) {
    MemberStatus m;
    m.hostname = i == 0 ? "<b>host</b>" : "n";
    m.group_rank = i;
    m.nproc_per_node = 8;
    m.state = "running";
    run.members.push_back(m);
  }
  const TimePoint now = std::chrono::steady_clock::now();
  run.members[0].last_seen = now - std::chrono::milliseconds(1500);
  run.restarts.push_back(LostNodeRestart(now, Cause::kNodeLostLease));
  const std::string page = RenderStatusPage({run}, ServerMetrics(), "h:1", now);
  EXPECT_THAT(page, Not(HasSubstr("<script>")));
  EXPECT_THAT(page, HasSubstr("&lt;script&gt;"));
  EXPECT_THAT(page, HasSubstr("&lt;b&gt;host&lt;/b&gt;"));
  EXPECT_THAT(page, HasSubstr("<td>8-15</td>")) << "group rank 1 of 8 workers each";
  EXPECT_THAT(page, HasSubstr("1.5 s ago"));
  EXPECT_THAT(page, HasSubstr("+4.2 ms"));
  EXPECT_THAT(page, HasSubstr("and 44 more"));
  EXPECT_THAT(page, HasSubstr("http-equiv=\"refresh\""));
  EXPECT_THAT(page, Not(HasSubstr("src="))) << "nothing loaded from elsewhere";
}

// Issue 40: the spares waiting and used, a spare's state, and for a restart the lost node's
// silence and whether a spare was taken.
TEST(StatusPageTest, SparesAndTheRestartsThatTookOneAreShown) {
  RunStatus run;
  run.run_id = "job";
  run.phase = RunPhase::kRunning;
  run.spares = 2;
  run.spares_used = 1;
  MemberStatus spare;
  spare.hostname = "n9";
  spare.state = "spare";
  run.members.push_back(spare);
  const TimePoint now = std::chrono::steady_clock::now();
  RestartRecord r = LostNodeRestart(now, Cause::kNodeLostStream);
  r.lost_silent_s = 0.28;
  r.spare_used = true;
  run.restarts.push_back(r);
  const std::string page = RenderStatusPage({run}, ServerMetrics(), "h:1", now);
  EXPECT_THAT(page, HasSubstr("spares 2 (used 1)"));
  EXPECT_THAT(page, HasSubstr("<td>spare</td>"));
  EXPECT_THAT(page, HasSubstr("<th>lost node silent</th>"));
  EXPECT_THAT(page, HasSubstr("<td>280 ms</td>"));
  EXPECT_THAT(page, HasSubstr("<td>taken</td>"));
}

TEST(StatusPageTest, StepsWithFieldsOfTheWrongTypeAreShownWithoutThem) {
  // An agent may send anything as a step: json::value() would throw on these (and end the
  // server, which renders on its loop).
  RunStatus run;
  run.run_id = "job";
  run.steps = {R"({"step":["recovered"],"node":7,"round":"2","ts_ms":1e300,"cause":{}})",
               R"({"step":"closed","ts_ms":"soon","detail":[1],"round":3.5})",
               R"({"step":"workers_started","node":"n1","round":4,"ts_ms":1000})", "[1,2]",
               "not json"};
  std::string page;
  ASSERT_NO_THROW(
      page = RenderStatusPage({run}, ServerMetrics(), "h:1", std::chrono::steady_clock::now()));
  EXPECT_THAT(page, HasSubstr("<td>closed</td>"));
  EXPECT_THAT(page,
              HasSubstr("<td>00:00:01.000</td><td>n1</td><td>workers_started</td><td>4</td>"));
}

}  // namespace
}  // namespace ddprun::rendezvous
