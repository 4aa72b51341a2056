// In-process recovery's state agreement with real gloo ranks (threads sharing a
// c10d::HashStore): the source is the lowest rank with the highest step, its bytes reach every
// other rank, a root that has no bytes fails everyone at once; and StepUndo puts back what an
// abandoned step changed.
#include "trainer/train/state_sync.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
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

std::vector<StateSource> Agree(const std::vector<int64_t>& steps) {
  std::vector<StateSource> out(steps.size());
  OnRanks(static_cast<int>(steps.size()), [&](Communicator* comm) {
    absl::StatusOr<StateSource> s = AgreeOnStateSource(steps[comm->rank()], comm, torch::kCPU);
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
    for (const StateSource& s : Agree(steps)) {
      EXPECT_EQ(s.rank, rank);
      EXPECT_EQ(s.step, step);
    }
  }
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
