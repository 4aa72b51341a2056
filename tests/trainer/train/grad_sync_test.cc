// Two real gloo ranks (threads sharing a c10d::HashStore): after each step the parameters are
// identical on both ranks and equal to single-process training on the combined batch.
#include "trainer/train/grad_sync.h"

#include <torch/torch.h>

#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "gtest/gtest.h"
#include "trainer/train/adadelta.h"
#include "trainer/train/comm.h"
#include "trainer/train/mnist_net.h"

namespace ddprun::trainer {
namespace {

constexpr int kWorld = 2;
constexpr int kPerRank = 4;
constexpr int kSteps = 3;

struct Batch {
  torch::Tensor x, y;
};

std::vector<Batch> MakeBatches() {
  torch::manual_seed(123);
  std::vector<Batch> out;
  for (int s = 0; s < kSteps; ++s) {
    out.push_back({torch::randn({kWorld * kPerRank, 1, 28, 28}),
                   torch::randint(0, 10, {kWorld * kPerRank}, torch::kInt64)});
  }
  return out;
}

std::vector<torch::Tensor> Snapshot(MnistNet& m) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : m->parameters()) out.push_back(p.detach().clone());
  return out;
}

// Single process on the combined batch.
std::vector<torch::Tensor> TrainReference(const std::vector<Batch>& batches) {
  torch::manual_seed(1);
  MnistNet model;
  model->eval();  // no dropout: the comparison must be deterministic
  Adadelta opt(model->parameters(), {});
  for (const Batch& b : batches) {
    opt.ZeroGrad();
    torch::nll_loss(model->forward(b.x), b.y).backward();
    opt.Step();
  }
  return Snapshot(model);
}

struct RankResult {
  std::vector<torch::Tensor> params;
  std::vector<float> control;
  int buckets = 0;
  std::string error;
};

void RunRank(int rank, MnistNet model, c10::intrusive_ptr<c10d::Store> store,
             const std::vector<Batch>& batches, int64_t bucket_cap, RankResult* out) {
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      CommunicatorFromStore(store, rank, kWorld, CommOptions{});
  if (!comm.ok()) {
    out->error = comm.status().ToString();
    return;
  }
  model->eval();
  absl::Status s = GradientSynchronizer::BroadcastFromRankZero(model->parameters(), comm->get());
  if (!s.ok()) {
    out->error = s.ToString();
    return;
  }
  Adadelta opt(model->parameters(), {});
  GradSyncOptions options;
  options.bucket_cap_bytes = bucket_cap;
  GradientSynchronizer sync(model->parameters(), comm->get(), options);
  out->buckets = sync.num_buckets();
  for (const Batch& b : batches) {
    opt.ZeroGrad();
    torch::Tensor x = b.x.narrow(0, rank * kPerRank, kPerRank);
    torch::Tensor y = b.y.narrow(0, rank * kPerRank, kPerRank);
    torch::Tensor loss = torch::nll_loss(model->forward(x), y);
    sync.Begin({rank == 0 ? 1.0f : 0.0f, rank == 0 ? 0.5f : 0.25f});
    loss.backward();
    s = sync.Finish(&out->control);
    if (!s.ok()) {
      out->error = s.ToString();
      return;
    }
    opt.Step();
  }
  out->params = Snapshot(model);
}

void CheckTwoRanks(int64_t bucket_cap, int min_buckets) {
  const std::vector<Batch> batches = MakeBatches();
  const std::vector<torch::Tensor> reference = TrainReference(batches);
  auto store = c10::make_intrusive<c10d::HashStore>();
  // Models are built here, not in the rank threads: the default generator is process-wide.
  // Rank 1 starts from other weights: the broadcast must make them identical.
  torch::manual_seed(1);
  MnistNet m0;
  torch::manual_seed(99);
  MnistNet m1;
  ASSERT_FALSE(torch::equal(m0->parameters()[0], m1->parameters()[0]));
  RankResult r0, r1;
  std::thread t0(RunRank, 0, m0, store, std::cref(batches), bucket_cap, &r0);
  std::thread t1(RunRank, 1, m1, store, std::cref(batches), bucket_cap, &r1);
  t0.join();
  t1.join();
  ASSERT_TRUE(r0.error.empty()) << r0.error;
  ASSERT_TRUE(r1.error.empty()) << r1.error;
  EXPECT_GE(r0.buckets, min_buckets);
  ASSERT_EQ(r0.params.size(), reference.size());
  for (size_t i = 0; i < reference.size(); ++i) {
    EXPECT_TRUE(torch::equal(r0.params[i], r1.params[i])) << "parameter " << i << " differs";
    EXPECT_TRUE(torch::allclose(r0.params[i], reference[i], /*rtol=*/1e-4, /*atol=*/1e-5))
        << "parameter " << i << " max diff "
        << (r0.params[i] - reference[i]).abs().max().item<float>();
  }
  // Control slots are summed, not averaged.
  ASSERT_EQ(r1.control.size(), 2u);
  EXPECT_FLOAT_EQ(r1.control[0], 1.0f);
  EXPECT_FLOAT_EQ(r1.control[1], 0.75f);
}

TEST(GradSyncTest, TwoRanksMatchCombinedBatchSeveralBuckets) {
  torch::set_num_threads(1);
  CheckTwoRanks(/*bucket_cap=*/64 << 10, /*min_buckets=*/3);
}

TEST(GradSyncTest, TwoRanksMatchCombinedBatchOneBucket) {
  torch::set_num_threads(1);
  CheckTwoRanks(/*bucket_cap=*/int64_t{1} << 30, /*min_buckets=*/1);
}

TEST(GradSyncTest, WorldSizeOneIsPlainTraining) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  DistEnv env;  // world size 1: no store, no-op collectives
  absl::StatusOr<std::unique_ptr<Communicator>> comm = ConnectCommunicator(env, CommOptions{});
  ASSERT_TRUE(comm.ok()) << comm.status();
  torch::manual_seed(1);
  MnistNet model;
  GradientSynchronizer sync(model->parameters(), comm->get());
  torch::Tensor x = torch::randn({2, 1, 28, 28});
  torch::Tensor loss = torch::nll_loss(model->forward(x), torch::tensor({1, 2}));
  sync.Begin({0.0f, 3.0f});
  loss.backward();
  std::vector<float> control;
  ASSERT_TRUE(sync.Finish(&control).ok());
  EXPECT_FLOAT_EQ(control[1], 3.0f);
  for (const torch::Tensor& p : model->parameters()) EXPECT_TRUE(p.grad().defined());
}

}  // namespace
}  // namespace ddprun::trainer
