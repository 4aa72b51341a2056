// The preflight's judge: each node's best pair against the job's median, with the margin for
// compute and its floor for throughput (rendezvous/preflight/preflight_judge.h).
#include "rendezvous/preflight/preflight_judge.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ddprun::rendezvous {
namespace {

using ::testing::HasSubstr;

// Node `id` with `gflops`, having probed `pairs`.
PreflightEntry Entry(const std::string& id, double gflops, std::vector<PairProbe> pairs) {
  PreflightReport r;
  r.cpu_gflops = gflops;
  r.pairs = std::move(pairs);
  return {id, "host-" + id, r};
}

PairProbe Pair(const std::string& peer, double send, double recv, double rtt = 0.05) {
  return {peer, rtt, send, recv, ""};
}

// A ring of four (each probes the next two) where every link moves `rate[i]` out of node i and
// every node receives at full speed: node i's sends are its own.
std::vector<PreflightEntry> Ring(const std::vector<double>& rate, double gflops = 10) {
  std::vector<PreflightEntry> entries;
  const size_t n = rate.size();
  for (size_t i = 0; i < n; ++i) {
    std::vector<PairProbe> pairs;
    for (size_t step = 1; step <= 2; ++step) {
      const size_t peer = (i + step) % n;
      pairs.push_back(Pair(std::to_string(peer), rate[i], rate[peer]));
    }
    entries.push_back(Entry(std::to_string(i), gflops, pairs));
  }
  return entries;
}

TEST(PreflightJudgeTest, AHealthyJobNamesNobody) {
  const std::vector<PreflightVerdict> v = JudgePreflight(Ring({9400, 9100, 9800, 9300}), 0.2);
  ASSERT_EQ(v.size(), 4u);
  for (const PreflightVerdict& n : v) {
    EXPECT_FALSE(n.slow()) << n.node_id << ": " << DescribeVerdict(n);
    EXPECT_THAT(DescribeVerdict(n), HasSubstr(": ok"));
  }
}

TEST(PreflightJudgeTest, ALinkAtATenthNamesItsNodeAndNotItsNeighbours) {
  const std::vector<PreflightVerdict> v = JudgePreflight(Ring({9400, 940, 9800, 9300}), 0.2);
  EXPECT_FALSE(v[0].slow()) << DescribeVerdict(v[0]);
  ASSERT_TRUE(v[1].slow());
  EXPECT_FALSE(v[2].slow()) << DescribeVerdict(v[2]);
  EXPECT_FALSE(v[3].slow()) << DescribeVerdict(v[3]);
  EXPECT_NEAR(v[1].figures.send_mbps, 940, 1e-9);
  EXPECT_NEAR(v[1].ratios.send_mbps, 940 / 9350.0, 1e-9);
  EXPECT_THAT(v[1].shortfalls.at(0), HasSubstr("send 940 Mbit/s, 0.10x the job's median 9350"));
  EXPECT_LT(v[1].worst_ratio, 0.11);
}

TEST(PreflightJudgeTest, ThroughputIsJudgedWithItsFloorNotTheComputeMargin) {
  // 0.7x the median: past a 20 % margin, within the floor (half the median) a probe's noise needs.
  EXPECT_FALSE(JudgePreflight(Ring({9400, 6500, 9800, 9300}), 0.2)[1].slow());
  // 0.45x: named.
  EXPECT_TRUE(JudgePreflight(Ring({9400, 4200, 9800, 9300}), 0.2)[1].slow());
  // A margin wider than the floor is the margin: 0.45x passes a margin of 2 (a third).
  EXPECT_FALSE(JudgePreflight(Ring({9400, 4200, 9800, 9300}), 2)[1].slow());
}

TEST(PreflightJudgeTest, ComputeIsJudgedWithTheMargin) {
  std::vector<PreflightEntry> e = Ring({9400, 9100, 9800, 9300});
  // The median of 10, 10, 8.8 and 7.5 is 9.4.
  e[2].report->cpu_gflops = 7.5;  // 0.80x: the median takes less than 1/1.2 of its time
  e[3].report->cpu_gflops = 8.8;  // 0.94x: within it
  const std::vector<PreflightVerdict> v = JudgePreflight(e, 0.2);
  EXPECT_TRUE(v[2].slow());
  EXPECT_THAT(v[2].shortfalls.at(0),
              HasSubstr("cpu 7.5 GFLOP/s, 0.80x the job's median 9.4 GFLOP/s"));
  EXPECT_FALSE(v[3].slow());
  EXPECT_FALSE(JudgePreflight(e, 0.3)[2].slow())
      << "a wider margin (1/1.3 = 0.77x) lets 0.80x pass";
}

TEST(PreflightJudgeTest, ANodeWithoutAReportIsNamedForIt) {
  std::vector<PreflightEntry> e = Ring({9400, 9100, 9800, 9300});
  e[3].report.reset();
  const std::vector<PreflightVerdict> v = JudgePreflight(e, 0.2);
  EXPECT_FALSE(v[3].reported);
  ASSERT_TRUE(v[3].slow());
  EXPECT_EQ(v[3].worst_ratio, 0);
  EXPECT_THAT(DescribeVerdict(v[3]), HasSubstr("no preflight report"));
  // Its peers' pairs to it still count for them.
  EXPECT_FALSE(v[2].slow());
}

TEST(PreflightJudgeTest, ANodeEveryPairOfWhichFailedReachedNoPeer) {
  std::vector<PreflightEntry> e;
  e.push_back(Entry("0", 10, {Pair("1", 9000, 9000)}));
  e.push_back(Entry("1", 10, {Pair("2", 9000, 9000)}));
  e.push_back(Entry("2", 10, {{"3", 0, 0, 0, "connect 10.0.0.3:4000: No route to host"}}));
  e.push_back(Entry("3", 10, {{"0", 0, 0, 0, "connect 10.0.0.0:4000: No route to host"}}));
  const std::vector<PreflightVerdict> v = JudgePreflight(e, 0.2);
  EXPECT_FALSE(v[2].slow()) << "its pair with node 1 is good";
  ASSERT_TRUE(v[3].slow());
  EXPECT_THAT(v[3].shortfalls.back(), HasSubstr("reached no peer"));
  EXPECT_THAT(v[3].shortfalls.back(), HasSubstr("No route to host"));
}

TEST(PreflightJudgeTest, WhereMostProbesFailedNobodyIsNamedForIt) {
  std::vector<PreflightEntry> e;
  e.push_back(Entry("0", 10, {{"1", 0, 0, 0, "the probe ran past its deadline"}}));
  e.push_back(Entry("1", 10, {{"2", 0, 0, 0, "the probe ran past its deadline"}}));
  e.push_back(Entry("2", 10, {Pair("3", 900, 900)}));
  e.push_back(Entry("3", 10, {{"0", 0, 0, 0, "the probe ran past its deadline"}}));
  const std::vector<PreflightVerdict> v = JudgePreflight(e, 0.2);
  for (const PreflightVerdict& n : v) EXPECT_FALSE(n.slow()) << DescribeVerdict(n);
}

TEST(PreflightJudgeTest, RoundTripsAreNamedOnlyAboveTheFloor) {
  std::vector<PreflightEntry> e = Ring({9400, 9100, 9800, 9300});
  // 4x the median but 0.15 ms above it: scheduling noise, not a link.
  for (PairProbe& p : e[1].report->pairs) p.rtt_ms = 0.2;
  EXPECT_FALSE(JudgePreflight(e, 0.2)[1].slow());
  // 5 ms: named (its neighbours' best pairs are the fast ones).
  for (PreflightEntry& entry : e) {
    for (PairProbe& p : entry.report->pairs) {
      if (entry.node_id == "1" || p.peer_node_id == "1") p.rtt_ms = 5;
    }
  }
  const std::vector<PreflightVerdict> v = JudgePreflight(e, 0.2);
  ASSERT_TRUE(v[1].slow());
  EXPECT_THAT(v[1].shortfalls.at(0), HasSubstr("rtt 5 ms"));
  EXPECT_FALSE(v[0].slow());
}

}  // namespace
}  // namespace ddprun::rendezvous
