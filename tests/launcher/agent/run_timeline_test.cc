#include "launcher/agent/run_timeline.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <utility>

#include "launcher/agent/goodput_ledger.h"

namespace ddprun::launcher {
namespace {

using rendezvous::Cause;
using std::chrono::milliseconds;

class RunTimelineTest : public ::testing::Test {
 protected:
  // Adds a step `ms` after the start; returns its JSON.
  nlohmann::json At(int ms, StepEvent e) {
    e.when = start_ + milliseconds(ms);
    e.unix_ms = 1'700'000'000'000 + ms;
    return nlohmann::json::parse(timeline_.Add(e));
  }
  static StepEvent Round(int64_t round, int world, int restarts) {
    StepEvent e{Step::kRoundComplete};
    e.round = round;
    e.world_size = world;
    e.group_rank = 0;
    e.restart_count = restarts;
    return e;
  }
  static StepEvent Failure(Cause cause, int rank, const std::string& host,
                           const std::string& detail) {
    StepEvent e{Step::kFailureDetected};
    e.cause = cause;
    e.rank = rank;
    e.host = host;
    e.detail = detail;
    return e;
  }
  static StepEvent Started(int64_t round, int workers, int restarts) {
    StepEvent e{Step::kWorkersStarted};
    e.round = round;
    e.workers = workers;
    e.restart_count = restarts;
    return e;
  }
  TimePoint start_ = std::chrono::steady_clock::now();
  RunTimeline timeline_{"job7", "n1"};
};

TEST_F(RunTimelineTest, EachStepIsOneJsonObjectWithTheRunAndNode) {
  const nlohmann::json j = At(0, Round(3, 8, 1));
  EXPECT_EQ(j["ts_ms"], 1'700'000'000'000);
  EXPECT_EQ(j["run_id"], "job7");
  EXPECT_EQ(j["node"], "n1");
  EXPECT_EQ(j["step"], "round_complete");
  EXPECT_EQ(j["round"], 3);
  EXPECT_EQ(j["world_size"], 8);
  EXPECT_FALSE(j.contains("cause")) << "unset fields are left out";
}

TEST_F(RunTimelineTest, ARestartReadsAsOneLineFromItsFailure) {
  At(0, StepEvent{Step::kJoining});
  At(5, Round(1, 4, 0));
  At(6, Started(1, 2, 0));
  EXPECT_EQ(timeline_.CycleLine(), std::nullopt) << "the first start is no restart";
  At(1000, Failure(Cause::kWorkerExit, 5, "n2", "exited 1"));
  At(1001, StepEvent{Step::kStopBegun});
  At(1005, Failure(Cause::kRemoteFailure, -1, "", ""));  // a later consequence, not the cause
  At(1011, StepEvent{Step::kStopFinished});
  At(1024, Round(2, 4, 1));
  At(1031, Started(2, 2, 1));
  EXPECT_EQ(timeline_.CycleLine(),
            "restart 1: rank 5 on n2 exited 1 -> all stopped +11 ms -> round 2 complete +24 ms "
            "-> 2 workers running +31 ms");
}

TEST_F(RunTimelineTest, AHangCycleShowsTheStacksAndAScaleUpIsNamedByItsRound) {
  At(0, Started(1, 2, 0));
  At(3000, Failure(Cause::kHang, 0, "n1", "hung (no progress for 3.0 s)"));
  At(3100, StepEvent{Step::kStacksTaken});
  At(3150, StepEvent{Step::kStopFinished});
  At(3160, Round(2, 2, 1));
  At(3170, Started(2, 2, 1));
  EXPECT_EQ(timeline_.CycleLine(),
            "restart 1: rank 0 on n1 hung (no progress for 3.0 s) -> stacks taken +100 ms -> "
            "all stopped +150 ms -> round 2 complete +160 ms -> 2 workers running +170 ms");
  const std::string joined = "node n3_1_ab (n3) joined";
  At(5000, Failure(HeardCause(Cause::kNodeJoined, false), -1, "", joined));
  At(5010, StepEvent{Step::kStopFinished});
  At(5020, Round(3, 3, 1));
  At(5030, Started(3, 2, 1));
  EXPECT_EQ(timeline_.CycleLine(),
            "round 3: node n3_1_ab (n3) joined -> all stopped +10 ms -> round 3 complete +20 ms "
            "-> 2 workers running +30 ms");
}

// A restart the rendezvous announced is labelled from its cause alone: the labels of the
// agent's timeline as they were, whatever the reason's words.
TEST_F(RunTimelineTest, ARestartIsLabelledByItsCauseNotItsReason) {
  const std::pair<Cause, const char*> told[] = {
      {Cause::kWorkerFailure, "remote_failure"},    {Cause::kHang, "hang"},
      {Cause::kNodeLostStream, "node_lost_stream"}, {Cause::kNodeLostLease, "node_lost_lease"},
      {Cause::kNodeJoined, "node_joined"},          {Cause::kNodeLeft, "node_left"},
      {Cause::kServerRestart, "server_restart"}};
  int ms = 0;
  for (const auto& [cause, label] : told) {
    // A reason reworded beyond recognition changes nothing.
    const nlohmann::json j =
        At(++ms, Failure(HeardCause(cause, cause == Cause::kHang), -1, "", "it went away"));
    EXPECT_EQ(j["cause"], label);
    EXPECT_EQ(j["detail"], "it went away");
  }
}

// A server from before Restart.cause says none: hang when it flagged one, else other.
// Issue 40: a loss the rendezvous detected after the node's silence, and a spare taken in its
// place, are in the failure's step, the recovery the goodput ledger closes, and its log line.
TEST_F(RunTimelineTest, ALostNodesDetectionAndTheSpareTakenAreRecorded) {
  StepEvent lost = Failure(Cause::kNodeLostStream, -1, "", "node n2 (n2) was lost");
  lost.detect_ms = 280;
  lost.spare_used = true;
  const nlohmann::json j = At(0, lost);
  EXPECT_EQ(j["detect_ms"], 280);
  EXPECT_EQ(j["spare_used"], true);
  EXPECT_FALSE(At(1, Failure(Cause::kWorkerExit, 3, "n1", "exited 1")).contains("spare_used"));

  GoodputLedger ledger(start_);
  ledger.OnFailure(start_, Cause::kNodeLostStream, milliseconds(280), /*spare_used=*/true);
  ledger.OnStopped(start_ + milliseconds(10));
  ledger.OnRoundComplete(start_ + milliseconds(20), 2);
  ledger.OnWorkersStarted(start_ + milliseconds(30), /*in_process=*/false);
  EXPECT_FALSE(ledger.OnStepReport(start_ + milliseconds(40), 0).has_value());  // restored
  const std::optional<RecoveryRecord> r = ledger.OnStepReport(start_ + milliseconds(50), 2);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->detect_ms, 280);
  EXPECT_TRUE(r->spare_used);
  EXPECT_THAT(FormatRecovery(*r, 0.9),
              ::testing::AllOf(::testing::HasSubstr("detected after +280 ms"),
                               ::testing::HasSubstr("a spare took the lost node's place")));
  StepEvent recovered{Step::kRecovered};
  recovered.recovery = *r;
  const nlohmann::json done = At(60, recovered);
  EXPECT_EQ(done["detect_ms"], 280);
  EXPECT_EQ(done["spare_used"], true);
}

TEST(HeardCauseTest, AServerThatSaysNoCauseGivesHangOrOther) {
  EXPECT_EQ(HeardCause(Cause::kUnspecified, true), Cause::kHang);
  EXPECT_EQ(HeardCause(Cause::kUnspecified, false), Cause::kUnspecified);
  EXPECT_STREQ(rendezvous::CauseLabel(HeardCause(Cause::kUnspecified, false)), "other");
}

}  // namespace
}  // namespace ddprun::launcher
