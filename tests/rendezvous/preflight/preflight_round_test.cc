// The preflight's round: the ring of targets, the reports it takes and the ones it ignores, and
// nodes that leave while it runs (rendezvous/preflight/preflight_round.h).
#include "rendezvous/preflight/preflight_round.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ddprun::rendezvous {
namespace {

std::vector<PreflightParticipant> Participants(int n) {
  std::vector<PreflightParticipant> p;
  for (int i = 0; i < n; ++i) {
    p.push_back(
        {std::to_string(i), "host-" + std::to_string(i), "10.0.0." + std::to_string(i), 4000 + i});
  }
  return p;
}

PreflightReport Report(int64_t generation) {
  PreflightReport r;
  r.generation = generation;
  r.cpu_gflops = 10;
  return r;
}

TEST(PreflightRoundTest, EachNodeProbesTheNextTwoInTheRing) {
  const PreflightRound round(7, Participants(4), PreflightSettings{}, TimePoint{});
  const auto requests = round.Requests();
  ASSERT_EQ(requests.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(requests[i].first, std::to_string(i));
    EXPECT_EQ(requests[i].second.generation, 7);
    ASSERT_EQ(requests[i].second.targets.size(), 2u);
    EXPECT_EQ(requests[i].second.targets[0].node_id, std::to_string((i + 1) % 4));
    EXPECT_EQ(requests[i].second.targets[0].port, 4000 + (i + 1) % 4);
    EXPECT_EQ(requests[i].second.targets[1].node_id, std::to_string((i + 2) % 4));
  }
}

TEST(PreflightRoundTest, TwoNodesProbeEachOtherAndANodeWithoutAListenerIsNotProbed) {
  std::vector<PreflightParticipant> p = Participants(3);
  p[1].port = 0;  // probes, is not probed
  const auto requests = PreflightRound(1, p, PreflightSettings{}, TimePoint{}).Requests();
  ASSERT_EQ(requests[0].second.targets.size(), 1u);
  EXPECT_EQ(requests[0].second.targets[0].node_id, "2");
  ASSERT_EQ(requests[1].second.targets.size(), 2u);  // 2, then 0
  EXPECT_EQ(requests[2].second.targets.size(), 1u);  // 0 only
  const auto two = PreflightRound(1, Participants(2), PreflightSettings{}, TimePoint{}).Requests();
  ASSERT_EQ(two[0].second.targets.size(), 1u);
  EXPECT_EQ(two[0].second.targets[0].node_id, "1");
  EXPECT_EQ(two[1].second.targets[0].node_id, "0");
}

TEST(PreflightRoundTest, CompleteWhenEveryNodeStillThereReported) {
  PreflightSettings settings;
  settings.deadline = std::chrono::seconds(10);
  PreflightRound round(3, Participants(3), settings, TimePoint{});
  EXPECT_EQ(round.deadline(), TimePoint{} + std::chrono::seconds(10));
  EXPECT_FALSE(round.Report("0", Report(2))) << "another generation's report";
  EXPECT_TRUE(round.Report("0", Report(3)));
  EXPECT_FALSE(round.Report("0", Report(3))) << "a second report";
  EXPECT_FALSE(round.Report("9", Report(3))) << "not a participant";
  EXPECT_TRUE(round.Report("1", Report(3)));
  EXPECT_FALSE(round.Complete());
  round.Forget("2");  // it left the run
  EXPECT_TRUE(round.Complete());
  const std::vector<PreflightVerdict> v = round.Judge();
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].node_id, "0");
  EXPECT_EQ(v[1].node_id, "1");
}

TEST(PreflightRoundTest, ANodeThatJoinsWhileItRunsProbesTheRingAndIsAwaited) {
  PreflightRound round(1, Participants(3), PreflightSettings{}, TimePoint{});
  const PreflightRequest late = round.Add({"9", "host-9", "10.0.0.9", 4009});
  ASSERT_EQ(late.targets.size(), 2u);
  EXPECT_EQ(late.targets[0].node_id, "0");
  EXPECT_EQ(late.targets[1].node_id, "1");
  for (const auto& [id, request] : round.Requests()) {
    for (const PreflightPeer& t : request.targets) EXPECT_NE(t.node_id, "9") << "not in the ring";
  }
  for (const char* id : {"0", "1", "2"}) EXPECT_TRUE(round.Report(id, Report(1)));
  EXPECT_FALSE(round.Complete()) << "the late node is awaited too";
  EXPECT_TRUE(round.Report("9", Report(1)));
  EXPECT_TRUE(round.Complete());
  EXPECT_EQ(round.Judge().size(), 4u);
}

}  // namespace
}  // namespace ddprun::rendezvous
