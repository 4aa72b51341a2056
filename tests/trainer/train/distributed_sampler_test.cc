#include "trainer/train/distributed_sampler.h"

#include <algorithm>
#include <map>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddprun::trainer {
namespace {

using ::testing::ElementsAre;

std::vector<int64_t> Shard(int64_t n, int world, int rank, int64_t epoch, int64_t offset = 0,
                           bool shuffle = true) {
  return DistributedSampler({n, world, rank, shuffle, 0}).Indices(epoch, offset);
}

// Expected values printed by torch 1.13's own DistributedSampler (python3-torch):
//   s = DistributedSampler(list(range(10)), num_replicas=3, rank=r); s.set_epoch(1); list(s)
TEST(DistributedSamplerTest, MatchesTorchDistributedSampler) {
  EXPECT_THAT(Shard(10, 3, 0, 1), ElementsAre(5, 2, 9, 4));
  EXPECT_THAT(Shard(10, 3, 1, 1), ElementsAre(6, 0, 3, 5));
  EXPECT_THAT(Shard(10, 3, 2, 1), ElementsAre(1, 8, 7, 6));
  // g = torch.Generator(); g.manual_seed(5); torch.randperm(10, generator=g)
  EXPECT_THAT(TorchRandperm(10, 5), ElementsAre(1, 4, 9, 6, 3, 5, 0, 2, 8, 7));
  // Padding longer than the dataset: n=2, 5 replicas.
  EXPECT_THAT(Shard(2, 5, 4, 0), ElementsAre(0));
}

TEST(DistributedSamplerTest, CoverageNoOverlapEqualShards) {
  const int64_t n = 1000;
  for (int world : {1, 2, 4, 8}) {
    std::multiset<int64_t> all;
    for (int r = 0; r < world; ++r) {
      std::vector<int64_t> s = Shard(n, world, r, 3);
      EXPECT_EQ(static_cast<int64_t>(s.size()), n / world);
      all.insert(s.begin(), s.end());
    }
    ASSERT_EQ(static_cast<int64_t>(all.size()), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(all.count(i), 1u) << "world " << world << " i " << i;
  }
}

TEST(DistributedSamplerTest, PaddingRepeatsFromTheStart) {
  const int64_t n = 10;
  const int world = 4;  // 12 slots: 2 padded
  std::map<int64_t, int> count;
  for (int r = 0; r < world; ++r) {
    std::vector<int64_t> s = Shard(n, world, r, 0);
    EXPECT_EQ(s.size(), 3u);
    for (int64_t i : s) ++count[i];
  }
  EXPECT_EQ(count.size(), static_cast<size_t>(n));  // every sample
  const std::vector<int64_t> perm = DistributedSampler({n, world, 0, true, 0}).Permutation(0);
  EXPECT_EQ(count[perm[0]], 2);
  EXPECT_EQ(count[perm[1]], 2);
  EXPECT_EQ(count[perm[2]], 1);
}

TEST(DistributedSamplerTest, ShuffleDependsOnEpochAndIsDeterministic) {
  EXPECT_EQ(Shard(100, 2, 0, 1), Shard(100, 2, 0, 1));
  EXPECT_NE(Shard(100, 2, 0, 1), Shard(100, 2, 0, 2));
  EXPECT_THAT(Shard(6, 2, 1, 7, 0, /*shuffle=*/false), ElementsAre(1, 3, 5));
}

// Rank r's step k consumes positions [k*B*W, (k+1)*B*W) of the epoch's order, so after k steps
// the global offset is k*B*W. Resuming there with another world size must hand out exactly
// the samples not yet seen.
TEST(DistributedSamplerTest, ResumeWithAnotherWorldSizeSeesEverySampleOnce) {
  const int64_t n = 960;
  const int64_t batch = 8;
  const int64_t epoch = 4;
  std::multiset<int64_t> seen;
  // 5 steps with world size 2.
  int world = 2;
  int64_t offset = 0;
  for (int r = 0; r < world; ++r) {
    std::vector<int64_t> s = Shard(n, world, r, epoch);
    seen.insert(s.begin(), s.begin() + 5 * batch);
  }
  offset += 5 * batch * world;
  // Continue with world size 3 for 7 steps.
  world = 3;
  for (int r = 0; r < world; ++r) {
    std::vector<int64_t> s = Shard(n, world, r, epoch, offset);
    EXPECT_EQ(static_cast<int64_t>(s.size()), (n - offset + world - 1) / world);
    seen.insert(s.begin(), s.begin() + 7 * batch);
  }
  offset += 7 * batch * world;
  // Finish with world size 4.
  world = 4;
  for (int r = 0; r < world; ++r) {
    std::vector<int64_t> s = Shard(n, world, r, epoch, offset);
    seen.insert(s.begin(), s.end());
  }
  ASSERT_EQ(static_cast<int64_t>(seen.size()), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen.count(i), 1u) << i;
}

TEST(DistributedSamplerTest, ResumeWithSameWorldSizeContinuesTheSameSequence) {
  const int64_t n = 200, batch = 10;
  for (int r = 0; r < 2; ++r) {
    std::vector<int64_t> full = Shard(n, 2, r, 1);
    std::vector<int64_t> rest = Shard(n, 2, r, 1, 3 * batch * 2);
    EXPECT_EQ(rest, std::vector<int64_t>(full.begin() + 3 * batch, full.end()));
  }
}

TEST(DistributedSamplerTest, OffsetPastTheEndIsEmpty) {
  EXPECT_TRUE(Shard(10, 2, 0, 1, 10).empty());
  EXPECT_TRUE(Shard(10, 2, 1, 1, 12).empty());
}

TEST(DistributedSamplerTest, EvaluationShardsHaveNoPadding) {
  std::set<int64_t> all;
  size_t total = 0;
  for (int r = 0; r < 3; ++r) {
    std::vector<int64_t> s = DistributedSampler({10, 3, r, false, 0}).IndicesWithoutPadding(0);
    total += s.size();
    all.insert(s.begin(), s.end());
  }
  EXPECT_EQ(total, 10u);
  EXPECT_EQ(all.size(), 10u);
}

}  // namespace
}  // namespace ddprun::trainer
