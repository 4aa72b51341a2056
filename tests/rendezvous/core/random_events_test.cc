// A long randomized test of the rendezvous state machine: seeded random event sequences through
// StateDriver (state_driver.h), with the invariants checked after every step. Bounded in wall
// time; a failure names the seed and step to replay.
#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "tests/rendezvous/core/state_driver.h"

namespace ddprun::rendezvous {
namespace {

using ::ddprun::rendezvous::testing::DriverParams;
using ::ddprun::rendezvous::testing::StateDriver;

TEST(RandomEventsTest, InvariantsHoldForArbitraryEventSequences) {
  const auto start = std::chrono::steady_clock::now();
  const auto budget = std::chrono::seconds(12);
  int seeds = 0, rounds = 0, assignments = 0, restarts = 0;
  for (uint32_t seed = 1; seed <= 6000; ++seed) {
    std::mt19937 rng(seed);
    auto uniform = [&rng](int lo, int hi) {
      return std::uniform_int_distribution<int>(lo, hi)(rng);
    };
    DriverParams p;
    p.min_nodes = uniform(1, 4);
    p.max_nodes = p.min_nodes + uniform(0, 4);
    p.nproc = uniform(1, 3);
    p.max_restarts = uniform(0, 5);
    StateDriver driver(p, uniform);
    for (int step = 0; step < 3000; ++step) {
      const std::string violation = driver.Step();
      ASSERT_EQ(violation, "") << "seed " << seed << " nnodes " << p.min_nodes << ":" << p.max_nodes
                               << " max_restarts " << p.max_restarts;
    }
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
  std::printf("seeds=%d rounds=%d assignments=%d restarts=%d\n", seeds, rounds, assignments,
              restarts);
}

}  // namespace
}  // namespace ddprun::rendezvous
