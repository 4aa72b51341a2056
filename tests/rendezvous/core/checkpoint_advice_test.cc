// The checkpoint advice in the server's state (issue 41, point 3): a run's advice from its
// agents' reports, recomputed at each failure restart, on the status, /metrics and the page.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "rendezvous/checkpoints/daly_model.h"
#include "rendezvous/core/server_metrics.h"
#include "rendezvous/core/status_page.h"
#include "tests/rendezvous/core/state_fixture.h"
#include "tests/rendezvous/core/state_test_util.h"

namespace ddprun::rendezvous {
namespace {

using ::testing::HasSubstr;
using testing::MakeJoin;

class CheckpointAdviceTest : public testing::ServerStateTest {
 protected:
  // Nodes 1 and 2 of a fixed run of 2, with mtbf=600 as the prior: round 1 runs.
  void SetUp() override {
    for (ConnId c = 1; c <= 2; ++c) {
      JoinRequest r = MakeJoin("run", std::to_string(c), 2, 2);
      r.timeouts.mtbf = std::chrono::seconds(600);
      Join(c, r);
    }
    ASSERT_EQ(Status().phase, RunPhase::kRunning);
  }
  void Saved(ConnId conn, double s) {
    CheckpointReport r;
    r.save_s = s;
    state_.Checkpoint(conn, r, clock_.Now());
  }
  void Fail(ConnId conn) {
    WorkerFailure f;
    f.hostname = "h";
    f.exit_code = 1;
    state_.GroupStatus(conn, Status().round, GroupState::kFailed, f, clock_.Now());
  }
};

TEST_F(CheckpointAdviceTest, NoAdviceUntilASaveTimeIsReported) {
  EXPECT_FALSE(Status().checkpoint_advice.has_value());
  EXPECT_EQ(state_.CheckpointIntervalOf(1), 0);
  clock_.Advance(std::chrono::seconds(60));
  Saved(1, 2);
  const std::optional<CheckpointAdvice> a = Status().checkpoint_advice;
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->failures, 0);
  EXPECT_DOUBLE_EQ(a->mtbf_s, 660);  // 60 s trained + the 600 s prior
  EXPECT_DOUBLE_EQ(a->interval_s, DalyInterval(2, 660));
  EXPECT_DOUBLE_EQ(state_.CheckpointIntervalOf(1), a->interval_s) << "what the acks carry";
  EXPECT_DOUBLE_EQ(state_.CheckpointIntervalOf(2), a->interval_s);
}

TEST_F(CheckpointAdviceTest, EachFailureRestartRecomputesTheAdvice) {
  clock_.Advance(std::chrono::seconds(300));
  Saved(1, 2);
  const double before = state_.CheckpointIntervalOf(1);
  Fail(1);
  const std::optional<CheckpointAdvice> one = Status().checkpoint_advice;
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->failures, 1);
  EXPECT_DOUBLE_EQ(one->mtbf_s, 450);  // (300 + 600) / 2
  EXPECT_LT(state_.CheckpointIntervalOf(1), before);
}

TEST_F(CheckpointAdviceTest, MetricsAndThePageShowIt) {
  clock_.Advance(std::chrono::seconds(60));
  Saved(2, 1.5);
  CheckpointReport ratio;
  ratio.effective_ratio = 0.93;
  state_.Checkpoint(1, ratio, clock_.Now());
  const RunStatus run = Status();
  const std::string text = FormatMetrics(ServerMetrics(), {run});
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_checkpoint_interval_advice_seconds{run_id=\"run\"} "));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_mtbf_seconds{run_id=\"run\"} 660\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_checkpoint_save_seconds{run_id=\"run\"} 1.5\n"));
  EXPECT_THAT(text, HasSubstr("ddprun_rdzv_checkpoint_advice_predicted_ratio{run_id=\"run\"} "));
  const std::string page = RenderStatusPage({run}, ServerMetrics(), "h:1", clock_.Now());
  EXPECT_THAT(page, HasSubstr("checkpoint every "));
  EXPECT_THAT(page, HasSubstr("% predicted, 93.0 % measured"));
}

}  // namespace
}  // namespace ddprun::rendezvous
