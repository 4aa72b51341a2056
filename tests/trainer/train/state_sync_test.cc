// In-process recovery's state agreement with real gloo ranks (threads sharing a
// c10d::HashStore): the source is the lowest rank with the highest step that can be true, its
// bytes reach every other rank, a root that has no bytes fails everyone at once, a root that
// lies (a step of 10^15, a size of 10^15 bytes) is refused; and StepUndo puts back what an
// abandoned step changed.
#include "trainer/train/state_sync.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/io/memory_bound.h"
#include "trainer/train/checkpoint_broadcast.h"

namespace ddprun::trainer {
namespace {

using ::testing::HasSubstr;

// Runs `body(comm)` on `world` ranks, one thread each, over one fresh store.
void OnRanks(int world, const std::function<void(Communicator*)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          CommunicatorFromStore(store, r, world, CommOptions{});
      ASSERT_TRUE(comm.ok()) << comm.status();
      body(comm->get());
    });
  }
  for (std::thread& t : threads) t.join();
}

std::vector<StateSource> Agree(const std::vector<StateClaim>& claims) {
  std::vector<StateSource> out(claims.size());
  OnRanks(static_cast<int>(claims.size()), [&](Communicator* comm) {
    absl::StatusOr<StateSource> s = AgreeOnStateSource(claims[comm->rank()], comm, torch::kCPU);
    ASSERT_TRUE(s.ok()) << s.status();
    out[comm->rank()] = *s;
  });
  return out;
}

TEST(StateSyncTest, LowestRankWithTheHighestStepIsTheSourceOnEveryRank) {
  for (const auto& [steps, rank, step] :
       std::vector<std::tuple<std::vector<int64_t>, int, int64_t>>{
           {{5, 7, 7}, 1, 7},       // a tie goes to the lower rank
           {{-1, -1, -1}, -1, -1},  // nobody has state: the first round
           {{-1, 3, -1}, 1, 3},     // only a survivor has state, replacements have none
           {{0, -1, 0}, 0, 0},      // step 0 (the initial broadcast) is a state
       }) {
    std::vector<StateClaim> claims;
    for (int64_t s : steps) claims.push_back({s, s >= 0});
    for (const StateSource& s : Agree(claims)) {
      EXPECT_EQ(s.rank, rank);
      EXPECT_EQ(s.step, step);
    }
  }
}

constexpr int64_t kHuge = 1000000000000000;  // a lying rank's step or size

// A step is a claim: more than one step ahead of every other rank while a survivor is there to
// contradict it, it cannot be true (every step all-reduces).
TEST(StateSyncTest, AStepThatCannotBeTrueIsRefused) {
  struct Case {
    std::vector<StateClaim> claims;
    int rank;
    int64_t step;
    std::vector<int> refused;
  };
  for (const Case& c : std::vector<Case>{
           {{{4, true}, {kHuge, true}, {-1, false}}, 0, 4, {1}},       // the survivor contradicts
           {{{kHuge, false}, {4, true}, {-1, false}}, 1, 4, {0}},      // a replacement lying
           {{{4, true}, {5, true}, {-1, false}}, 1, 5, {}},            // one step ahead: true
           {{{-1, false}, {kHuge, true}}, 1, kHuge, {}},               // the only survivor
           {{{150, true}, {100, false}}, 0, 150, {}},                  // a replacement's checkpoint
           {{{kHuge, true}, {kHuge, true}, {3, true}}, 0, kHuge, {}},  // two back each other
           {{{4, true}, {-5, true}, {std::numeric_limits<int64_t>::max(), true}},
            0,
            4,
            {1, 2}},  // invalid
       }) {
    const StateSource s = ChooseStateSource(c.claims, kMaxStepLead);
    EXPECT_EQ(s.rank, c.rank);
    EXPECT_EQ(s.step, c.step);
    std::vector<int> refused;
    for (const auto& [r, why] : s.refused) refused.push_back(r);
    EXPECT_EQ(refused, c.refused);
  }
  const StateSource s = ChooseStateSource({{4, true}, {kHuge, true}, {-1, false}}, 1);
  ASSERT_EQ(s.refused.size(), 1u);
  EXPECT_EQ(s.refused[0].second,
            "claims step 1000000000000000, more than 1 ahead of every other rank (rank 0, a "
            "survivor, holds step 4)");
  // Over real collectives: every rank refuses the same claim and picks the same source.
  for (const StateSource& got : Agree({{4, true}, {kHuge, true}, {-1, false}})) {
    EXPECT_EQ(got.rank, 0);
    EXPECT_EQ(got.step, 4);
    ASSERT_EQ(got.refused.size(), 1u);
    EXPECT_EQ(got.refused[0].first, 1);
  }
}

// A root that announces 10^15 bytes: the receivers refuse before allocating anything.
TEST(StateSyncTest, ASizeAnnouncedByTheRootIsCheckedBeforeAnythingIsAllocated) {
  std::vector<absl::Status> got(3);
  OnRanks(3, [&](Communicator* comm) {
    if (comm->rank() == 2) {  // the liar speaks BroadcastBytes' first message only
      torch::Tensor size = torch::tensor({kHuge});
      got[2] = comm->Broadcast(size, 2);
      return;
    }
    got[comm->rank()] = BroadcastBytes(std::string(), 2, comm, torch::kCPU, "send").status();
  });
  for (int r : {0, 1}) {
    EXPECT_EQ(got[r].code(), absl::StatusCode::kResourceExhausted) << got[r];
    EXPECT_THAT(got[r].message(), HasSubstr("rank 2 announces 1000000000000000 bytes, more than "
                                            "this process takes"));
  }
  // An explicit limit.
  std::vector<absl::StatusOr<std::string>> small(2);
  OnRanks(2, [&](Communicator* comm) {
    small[comm->rank()] =
        BroadcastBytes(std::string(100, 'x'), 0, comm, torch::kCPU, "send", /*max_bytes=*/50);
  });
  // (The root's send may fail or not: its receiver left without taking the bytes.)
  EXPECT_EQ(small[1].status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(small[1].status().message(), HasSubstr("(50 bytes: the caller's limit)"));
}

TEST(StateSyncTest, TheMemoryBoundIsTheSmallerOfMemAvailableAndTheCgroupsHeadroom) {
  const std::string meminfo = "MemTotal:  8000 kB\nMemAvailable:    2000 kB\nBuffers: 1 kB\n";
  std::optional<MemoryBound> b = MemoryBoundFrom(meminfo, "max\n", "100\n");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->bytes, 2000 * 1024);
  EXPECT_EQ(b->what, "memory available");
  b = MemoryBoundFrom(meminfo, "1048576\n", "1000\n");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->bytes, 1048576 - 1000);
  EXPECT_EQ(b->what, "memory left in this cgroup");
  EXPECT_FALSE(MemoryBoundFrom("", "", "").has_value());
  b = AvailableMemory();
  ASSERT_TRUE(b.has_value());
  EXPECT_GT(b->bytes, 0);
}

TEST(StateSyncTest, TheSourcesBytesReachEveryOtherRank) {
  std::string payload(100000, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7 % 251);
  std::vector<std::string> restored(3);
  std::vector<int> serialized(3, 0);
  OnRanks(3, [&](Communicator* comm) {
    const int r = comm->rank();
    absl::StatusOr<int64_t> n = SyncStateFrom(
        {2, 9}, comm, torch::kCPU,
        [&]() -> absl::StatusOr<std::string> {
          ++serialized[r];
          return payload;
        },
        [&](absl::string_view bytes) {
          restored[r] = std::string(bytes);
          return absl::OkStatus();
        });
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, static_cast<int64_t>(payload.size()));
  });
  EXPECT_EQ(serialized, (std::vector<int>{0, 0, 1}));
  EXPECT_TRUE(restored[0] == payload);
  EXPECT_TRUE(restored[1] == payload);
  EXPECT_TRUE(restored[2].empty());  // the source keeps its own state
}

TEST(StateSyncTest, ARootWithoutItsBytesFailsEveryRankAtOnce) {
  std::vector<absl::Status> got(2);
  OnRanks(2, [&](Communicator* comm) {
    absl::StatusOr<std::string> mine = comm->rank() == 1
                                           ? absl::StatusOr<std::string>(absl::InternalError("x"))
                                           : absl::StatusOr<std::string>(std::string());
    got[comm->rank()] = BroadcastBytes(mine, 1, comm, torch::kCPU, "serialise").status();
  });
  EXPECT_EQ(got[1].code(), absl::StatusCode::kInternal);
  EXPECT_EQ(got[0].code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got[0].message(), HasSubstr("rank 1 could not serialise"));
}

TEST(StateSyncTest, StepUndoPutsBackGeneratorAndBuffersAndZeroesGradients) {
  torch::manual_seed(3);
  torch::Tensor buffer = torch::arange(4, torch::kFloat32);
  torch::Tensor param = torch::ones({3}, torch::requires_grad());
  param.mutable_grad() = torch::full({3}, 5.0f);
  StepUndo undo({buffer}, torch::kCPU);
  const torch::Tensor first_draw = torch::rand({8});
  buffer.mul_(3);  // what a BatchNorm forward does to its running statistics
  undo.Apply({param});
  EXPECT_TRUE(torch::equal(torch::rand({8}), first_draw));  // the same dropout masks again
  EXPECT_TRUE(torch::equal(buffer, torch::arange(4, torch::kFloat32)));
  EXPECT_TRUE(torch::equal(param.grad(), torch::zeros({3})));
}

}  // namespace
}  // namespace ddprun::trainer
