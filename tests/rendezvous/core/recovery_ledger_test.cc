#include "rendezvous/core/recovery_ledger.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "rendezvous/core/server_metrics.h"
#include "rendezvous/core/server_state.h"
#include "rendezvous/core/status_page.h"
#include "tests/rendezvous/core/state_test_util.h"

namespace ddprun::rendezvous {
namespace {

using ::testing::HasSubstr;
using testing::MakeJoin;
using ::testing::Not;

const TimePoint kT0 = TimePoint() + std::chrono::hours(1);

// The agent's line (launcher/agent/run_timeline.cc) for one recovery.
std::string Recovered(const std::string& node, int64_t round, const std::string& mode,
                      const std::string& cause, int64_t steps_lost, double ratio = 0.934) {
  return absl::StrCat(
      R"({"ts_ms":1700000000123,"run_id":"job","node":")", node, R"(","step":"recovered",)",
      R"("round":)", round, R"(,"mode":")", mode, R"(","cause":")", cause, R"(",)",
      R"("detect_ms":0,"stop_ms":12,"rendezvous_ms":40,"start_ms":55,"restore_ms":900,)",
      R"("first_step_ms":1250,"steps_lost":)", steps_lost, R"(,"restored_step":57,)",
      R"("effective_ratio":)", ratio, "}");
}

TEST(RecoveryLedgerTest, ARecoveredLineIsParsedWithEveryPhase) {
  RecoveryLedger ledger;
  EXPECT_TRUE(ledger.Add(Recovered("n1", 3, "in-process", "worker_exit", 4), kT0));
  ASSERT_EQ(ledger.latest().size(), 1u);
  const RecoveryRecord& r = ledger.latest().front();
  EXPECT_EQ(r.node, "n1");
  EXPECT_EQ(r.round, 3);
  EXPECT_EQ(r.mode, "in-process");
  EXPECT_EQ(r.cause, "worker_exit");
  EXPECT_EQ(r.received, kT0);
  EXPECT_EQ(r.phase_ms[static_cast<size_t>(RecoveryPhase::kDetect)], 0.0);
  EXPECT_EQ(r.phase_ms[static_cast<size_t>(RecoveryPhase::kStop)], 12.0);
  EXPECT_EQ(r.phase_ms[static_cast<size_t>(RecoveryPhase::kRendezvous)], 40.0);
  EXPECT_EQ(r.phase_ms[static_cast<size_t>(RecoveryPhase::kStart)], 55.0);
  EXPECT_EQ(r.phase_ms[static_cast<size_t>(RecoveryPhase::kRestore)], 900.0);
  EXPECT_EQ(r.phase_ms[static_cast<size_t>(RecoveryPhase::kFirstStep)], 1250.0);
  EXPECT_EQ(r.steps_lost, 4);
  EXPECT_EQ(r.restored_step, 57);
  EXPECT_EQ(r.effective_ratio, 0.934);
  EXPECT_EQ((ledger.counts().at({"in-process", "worker_exit"})), 1u);
  const Histogram& first_step =
      ledger.phase_seconds().at({"in-process", RecoveryPhase::kFirstStep});
  EXPECT_EQ(first_step.count(), 1u);
  EXPECT_DOUBLE_EQ(first_step.sum(), 1.25);
  EXPECT_EQ(ledger.steps_lost().at("in-process"), 4u);
  EXPECT_EQ(ledger.effective_ratios().at("n1").ratio, 0.934);
}

TEST(RecoveryLedgerTest, OtherStepsAndGarbageAreNotRecoveries) {
  RecoveryLedger ledger;
  const TimePoint now = kT0;
  for (const std::string& line : std::vector<std::string>{
           "",
           "not json recovered",
           R"({"step":"recovered")",  // cut short
           R"(["recovered"])",
           R"("recovered")",
           R"({"step":"failure_detected","cause":"recovered"})",
           R"({"step":7,"note":"recovered"})",
           R"({"step":["recovered"]})",
           R"({"step":"recovered","round":1e400})",  // out of a double's range
           std::string("{\"step\":\"recovered\xff\"}"),
       }) {
    EXPECT_FALSE(ledger.Add(line, now)) << line;
  }
  EXPECT_TRUE(ledger.latest().empty());
  EXPECT_TRUE(ledger.counts().empty());
  EXPECT_TRUE(ledger.effective_ratios().empty());
}

TEST(RecoveryLedgerTest, BadFieldsAreDroppedAndTheRecoveryStillCounts) {
  RecoveryLedger ledger;
  ASSERT_TRUE(ledger.Add(
      R"({"step":"recovered","node":42,"round":-3,"mode":"warm","cause":{"x":1},)"
      R"("detect_ms":-1,"stop_ms":"12","rendezvous_ms":1e300,"start_ms":null,"restore_ms":true,)"
      R"("first_step_ms":18446744073709551615,"steps_lost":2.5,"restored_step":-9,)"
      R"("effective_ratio":1.5})",
      kT0));
  const RecoveryRecord& r = ledger.latest().front();
  EXPECT_EQ(r.node, "");
  EXPECT_EQ(r.round, -1);
  EXPECT_EQ(r.mode, "other");
  EXPECT_EQ(r.cause, "other");
  for (const std::optional<double>& ms : r.phase_ms) EXPECT_FALSE(ms.has_value());
  EXPECT_FALSE(r.steps_lost.has_value());
  EXPECT_FALSE(r.restored_step.has_value());
  EXPECT_FALSE(r.effective_ratio.has_value());
  EXPECT_EQ((ledger.counts().at({"other", "other"})), 1u);
  EXPECT_TRUE(ledger.phase_seconds().empty());
  EXPECT_TRUE(ledger.steps_lost().empty());
  EXPECT_TRUE(ledger.effective_ratios().empty());
  // NaN is not JSON; a ratio below 0 is no ratio either.
  EXPECT_FALSE(ledger.Add(R"({"step":"closed","node":"n1","effective_ratio":NaN})", kT0));
  EXPECT_FALSE(ledger.Add(R"({"step":"closed","node":"n1","effective_ratio":-0.1})", kT0));
  EXPECT_TRUE(ledger.effective_ratios().empty());
}

TEST(RecoveryLedgerTest, UnknownCausesAreOtherButThePageKeepsWhatWasSent) {
  RecoveryLedger ledger;
  ASSERT_TRUE(ledger.Add(Recovered("n1", 2, "cold", "deadline_missed", 0), kT0));
  EXPECT_EQ(ledger.latest().front().cause, "other");
  EXPECT_EQ(ledger.latest().front().cause_as_sent, "deadline_missed");
  EXPECT_EQ((ledger.counts().at({"cold", "other"})), 1u);
}

TEST(RecoveryLedgerTest, StepsLostCountOncePerRoundAtTheMostAnyAgentSaid) {
  RecoveryLedger ledger;
  // One restart into round 2: every agent lost the same steps (one saw one more).
  ledger.Add(Recovered("n1", 2, "in-process", "worker_exit", 5), kT0);
  ledger.Add(Recovered("n2", 2, "in-process", "remote_failure", 6), kT0);
  ledger.Add(Recovered("n3", 2, "in-process", "remote_failure", 5), kT0);
  EXPECT_EQ(ledger.steps_lost().at("in-process"), 6u);
  // The next restart counts again.
  ledger.Add(Recovered("n1", 3, "cold", "hang", 10), kT0);
  EXPECT_EQ(ledger.steps_lost().at("cold"), 10u);
  EXPECT_EQ(ledger.steps_lost().at("in-process"), 6u);
  // Each agent's recovery counts.
  EXPECT_EQ((ledger.counts().at({"in-process", "remote_failure"})), 2u);
  EXPECT_EQ(ledger.phase_seconds().at({"in-process", RecoveryPhase::kStop}).count(), 3u);
}

TEST(RecoveryLedgerTest, MemoryIsBounded) {
  RecoveryLedger ledger;
  for (int i = 0; i < 1000; ++i) {
    ledger.Add(Recovered(absl::StrCat("n", i), i, "cold", "worker_exit", 1), kT0);
  }
  EXPECT_EQ(ledger.latest().size(), kMaxRecoveryRecords);
  EXPECT_EQ(ledger.latest().back().round, 999) << "the newest are kept";
  EXPECT_EQ((ledger.counts().at({"cold", "worker_exit"})), 1000u) << "totals stay whole";
  EXPECT_EQ(ledger.steps_lost().at("cold"), 1000u);
  // Ratios: at most kMaxRatioNodes nodes, the one heard from longest ago makes room.
  for (size_t i = 0; i < kMaxRatioNodes + 10; ++i) {
    ledger.Add(absl::StrCat(R"({"step":"closed","node":"m)", i, R"(","effective_ratio":0.5})"),
               kT0 + std::chrono::milliseconds(i));
  }
  EXPECT_EQ(ledger.effective_ratios().size(), kMaxRatioNodes);
  EXPECT_EQ(ledger.effective_ratios().count("n0"), 0u);
  EXPECT_EQ(ledger.effective_ratios().count(absl::StrCat("m", kMaxRatioNodes + 9)), 1u);
  // A huge node name is cut (on a character's boundary) and cleaned of control characters.
  // Here byte 128 is the middle of the é.
  const std::string huge = "\\u0007" + std::string(126, 'x') + "\\u00e9";
  ledger.Add(R"({"step":"recovered","node":")" + huge + R"("})", kT0);
  EXPECT_EQ(ledger.latest().back().node, "?" + std::string(126, 'x'));
  ledger.Add(R"({"step":"recovered","node":"\u00e9)" + std::string(200, 'y') + R"("})", kT0);
  EXPECT_EQ(ledger.latest().back().node, "\xc3\xa9" + std::string(126, 'y'));
}

TEST(RecoveryLedgerTest, TheLatestRatioOfANodeWinsAndClosedLinesCarryIt) {
  RecoveryLedger ledger;
  ledger.Add(Recovered("n1", 2, "cold", "worker_exit", 1, 0.5), kT0);
  EXPECT_FALSE(ledger.Add(R"({"step":"closed","node":"n1","effective_ratio":0.75})",
                          kT0 + std::chrono::seconds(1)));
  EXPECT_EQ(ledger.effective_ratios().at("n1").ratio, 0.75);
  EXPECT_EQ(ledger.effective_ratios().at("n1").updated, kT0 + std::chrono::seconds(1));
  EXPECT_EQ(ledger.latest().size(), 1u) << "a closed line is no recovery";
}

TEST(RecoveryMetricsTest, FamiliesCarryTheRunsRecoveries) {
  ServerMetrics m;
  m.recoveries["job \"7\""].Add(Recovered("n1", 2, "in-process", "worker_exit", 4), kT0);
  m.recoveries["job \"7\""].Add(Recovered(R"(n\"2)", 2, "in-process", "remote_failure", 4), kT0);
  m.recoveries["job \"7\""].Add(Recovered("n1", 3, "cold", "hang", 9, 0.5), kT0);
  m.recoveries["gone"].Add(Recovered("n1", 3, "cold", "hang", 9), kT0);  // not in `runs`
  RunStatus run;
  run.run_id = "job \"7\"";
  const std::string text = FormatMetrics(m, {run});
  const std::string id = "run_id=\"job \\\"7\\\"\"";
  for (const char* family :
       {"ddprun_rdzv_recoveries_total counter", "ddprun_rdzv_recovery_seconds histogram",
        "ddprun_rdzv_recovery_steps_lost_total counter",
        "ddprun_rdzv_effective_training_ratio gauge"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("# TYPE ", family, "\n"))) << family;
  }
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_recoveries_total{" + id +
                              ",mode=\"in-process\",cause=\"worker_exit\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_recoveries_total{" + id +
                              ",mode=\"in-process\",cause=\"remote_failure\"} 1\n"));
  EXPECT_THAT(
      text, HasSubstr("ddprun_rdzv_recoveries_total{" + id + ",mode=\"cold\",cause=\"hang\"} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr(",cause=\"node_left\""))) << "only what happened";
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_recovery_seconds_bucket{" + id +
                              ",mode=\"in-process\",phase=\"first_step\",le=\"1\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_recovery_seconds_bucket{" + id +
                              ",mode=\"in-process\",phase=\"first_step\",le=\"2.5\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_recovery_seconds_sum{" + id +
                              ",mode=\"in-process\",phase=\"first_step\"} 2.5\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_recovery_seconds_count{" + id +
                              ",mode=\"cold\",phase=\"stop\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_recovery_seconds_bucket{" + id +
                              ",mode=\"cold\",phase=\"detect\",le=\"0.01\"} 1\n"));
  EXPECT_THAT(
      text, HasSubstr("ddprun_rdzv_recovery_steps_lost_total{" + id + ",mode=\"in-process\"} 4\n"));
  EXPECT_THAT(text,
              HasSubstr("ddprun_rdzv_recovery_steps_lost_total{" + id + ",mode=\"cold\"} 9\n"));
  EXPECT_THAT(text,
              HasSubstr("ddprun_rdzv_effective_training_ratio{" + id + ",node=\"n1\"} 0.5\n"));
  EXPECT_THAT(
      text, HasSubstr("ddprun_rdzv_effective_training_ratio{" + id + ",node=\"n\\\"2\"} 0.934\n"));
  EXPECT_THAT(text, Not(HasSubstr("run_id=\"gone\""))) << "a run the server no longer lists";
  // Each family's samples follow its own TYPE line, before the next family's.
  const size_t type = text.find("# TYPE ddprun_rdzv_recovery_steps_lost_total");
  EXPECT_LT(text.find("ddprun_rdzv_recovery_seconds_count{"), type);
  EXPECT_GT(text.find("ddprun_rdzv_recovery_steps_lost_total{"), type);
  EXPECT_LT(text.find("ddprun_rdzv_recovery_steps_lost_total{"),
            text.find("# TYPE ddprun_rdzv_effective_training_ratio"));
}

TEST(RecoveryStatusPageTest, TheRunShowsItsRecoveriesEscaped) {
  ServerMetrics m;
  RunStatus run;
  run.run_id = "job";
  run.phase = RunPhase::kRunning;
  const TimePoint now = kT0 + std::chrono::seconds(3);
  EXPECT_THAT(RenderStatusPage({run}, m, "h:1", now), Not(HasSubstr("Recoveries")))
      << "no section without recoveries";
  m.recoveries["job"].Add(Recovered("<b>n1</b>", 2, "in-process", "worker_exit", 4), kT0);
  m.recoveries["job"].Add(Recovered("n2", 3, "cold", "<script>", 7, 0.5), kT0);
  const std::string page = RenderStatusPage({run}, m, "h:1", now);
  EXPECT_THAT(page, HasSubstr("Recoveries"));
  EXPECT_THAT(page, Not(HasSubstr("<b>n1</b>")));
  EXPECT_THAT(page, Not(HasSubstr("<script>")));
  EXPECT_THAT(page, HasSubstr("<td>&lt;script&gt;</td>"));
  // Newest first: round 3 (cold), then round 2.
  const size_t cold = page.find("<td>3</td><td>cold</td>");
  const size_t in_process = page.find("<td>2</td><td>in-process</td>");
  ASSERT_NE(cold, std::string::npos) << page;
  ASSERT_NE(in_process, std::string::npos) << page;
  EXPECT_LT(cold, in_process);
  EXPECT_THAT(page, HasSubstr("<td>&lt;b&gt;n1&lt;/b&gt;</td><td>2</td><td>in-process</td>"
                              "<td>worker_exit</td><td>+0.0 ms</td><td>+12 ms</td><td>+40 ms</td>"
                              "<td>+55 ms</td><td>+900 ms</td><td>+1.2 s</td><td>4</td>"
                              "<td>57</td></tr>"));
  EXPECT_THAT(page, HasSubstr("<tr class=\"ratio\"><td>&lt;b&gt;n1&lt;/b&gt;</td><td>93.4%</td>"));
  EXPECT_THAT(page, HasSubstr("<tr class=\"ratio\"><td>n2</td><td>50.0%</td><td>3.0 s ago</td>"));
}

TEST(RecoveryServerStateTest, StepsFeedTheRunsLedgerWhichGoesWithTheRun) {
  ServerLimits limits;
  limits.closed_run_retention = std::chrono::seconds(10);
  ServerState s(limits);
  s.Join(1, MakeJoin("job", "1", 1, 1), kT0);
  s.Step(1, Recovered("host-1", 1, "in-process", "hang", 3), kT0);
  s.Step(1, "garbage", kT0);
  s.Step(2, Recovered("host-2", 1, "in-process", "hang", 3), kT0);  // not joined
  ASSERT_EQ(s.metrics().recoveries.count("job"), 1u);
  EXPECT_EQ(s.metrics().recoveries.at("job").latest().size(), 1u);
  EXPECT_THAT(FormatMetrics(s.metrics(), s.AllStatus(false)),
              HasSubstr("ddprun_rdzv_recoveries_total{run_id=\"job\",mode=\"in-process\","
                        "cause=\"hang\"} 1\n"));
  // The run ends (its only node leaves): its recoveries are forgotten with it.
  s.Leave(1, "bye", kT0);
  s.Tick(kT0 + std::chrono::seconds(11));
  EXPECT_EQ(s.num_runs(), 0u);
  EXPECT_EQ(s.metrics().recoveries.count("job"), 0u);
}

// A step event longer than a message's limit is kept whole, never cut into text that is no
// longer JSON (common/message_limit.h); one beyond twice the limit is dropped whole.
TEST(RecoveryServerStateTest, AStepIsNeverCutMidObject) {
  ServerLimits limits;
  const std::string step = Recovered("host-1", 1, "in-process", "hang", 3);
  limits.max_message_length = step.size() - 10;
  ServerState s(limits);
  s.Join(1, MakeJoin("job", "1", 1, 1), kT0);
  s.Step(1, step, kT0);
  ASSERT_EQ(s.metrics().recoveries.count("job"), 1u);
  EXPECT_EQ(s.metrics().recoveries.at("job").latest().size(), 1u);
  limits.max_message_length = step.size() / 2 - 1;
  ServerState small(limits);
  small.Join(1, MakeJoin("job", "1", 1, 1), kT0);
  small.Step(1, step, kT0);
  EXPECT_EQ(small.metrics().recoveries.count("job"), 0u);
}

}  // namespace
}  // namespace ddprun::rendezvous
