// torch.utils.data.distributed.DistributedSampler semantics (drop_last=False), extended with a
// resume position that does not depend on the world size.
//
// An epoch's global order is a permutation P of [0, n) (torch.randperm seeded with seed+epoch,
// the very sequence the Python sampler draws; identity when not shuffling). It is padded by
// repeating from its start to a multiple of the world size W, and rank r takes positions
// r, r+W, r+2W, ...: every rank gets ceil(n/W) samples. When every rank takes one batch of B
// per step, step k consumes exactly positions [k*B*W, (k+1)*B*W) of the padded order, so
// "samples consumed so far" is a global offset into P. Resuming at offset o with another world
// size W' shards the remainder P[o:] the same way (padded to a multiple of W'), so every
// sample not yet seen in this epoch is seen exactly once more (plus padding).
#ifndef DDPRUN_TRAINER_TRAIN_DISTRIBUTED_SAMPLER_H_
#define DDPRUN_TRAINER_TRAIN_DISTRIBUTED_SAMPLER_H_

#include <cstdint>
#include <vector>

namespace ddprun::trainer {

struct SamplerOptions {
  int64_t dataset_size = 0;
  int world_size = 1;
  int rank = 0;
  bool shuffle = true;
  uint64_t seed = 0;  // torch's DistributedSampler default; the permutation uses seed + epoch
};

class DistributedSampler {
 public:
  explicit DistributedSampler(SamplerOptions options) : options_(options) {}

  // This rank's indices for `epoch`, starting at global offset `offset` (samples of the epoch's
  // order already consumed by all ranks together). Empty when offset >= dataset size.
  std::vector<int64_t> Indices(int64_t epoch, int64_t offset = 0) const;

  // Like Indices() but without padding entries (for evaluation, where duplicates would skew the
  // counts); ranks may then differ by one sample.
  std::vector<int64_t> IndicesWithoutPadding(int64_t epoch) const;

  // ceil(remaining / W): how many samples each rank gets from `offset` on.
  int64_t NumSamples(int64_t offset = 0) const;

  // The epoch's global order (before padding).
  std::vector<int64_t> Permutation(int64_t epoch) const;

 private:
  SamplerOptions options_;
};

// torch.randperm(n, generator=torch.Generator().manual_seed(seed)) as int64 values.
std::vector<int64_t> TorchRandperm(int64_t n, uint64_t seed);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_DISTRIBUTED_SAMPLER_H_
