#include "trainer/train/distributed_sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <numeric>

namespace ddprun::trainer {

std::vector<int64_t> TorchRandperm(int64_t n, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor perm = at::randperm(n, gen, at::TensorOptions().dtype(at::kLong));
  const int64_t* p = perm.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + n);
}

std::vector<int64_t> DistributedSampler::Permutation(int64_t epoch) const {
  if (options_.shuffle) {
    return TorchRandperm(options_.dataset_size, options_.seed + static_cast<uint64_t>(epoch));
  }
  std::vector<int64_t> out(options_.dataset_size);
  std::iota(out.begin(), out.end(), 0);
  return out;
}

int64_t DistributedSampler::NumSamples(int64_t offset) const {
  const int64_t remaining = std::max<int64_t>(options_.dataset_size - offset, 0);
  return (remaining + options_.world_size - 1) / options_.world_size;
}

std::vector<int64_t> DistributedSampler::Indices(int64_t epoch, int64_t offset) const {
  const int64_t n = options_.dataset_size;
  offset = std::max<int64_t>(offset, 0);
  if (offset >= n) return {};
  const std::vector<int64_t> perm = Permutation(epoch);
  const int64_t remaining = n - offset;
  const int64_t per_rank = NumSamples(offset);
  const int64_t total = per_rank * options_.world_size;
  std::vector<int64_t> out;
  out.reserve(per_rank);
  for (int64_t pos = options_.rank; pos < total; pos += options_.world_size) {
    // Positions past the remainder wrap to the start of the epoch's order, as torch pads
    // (indices += indices[:padding_size], repeated when the padding exceeds n).
    out.push_back(pos < remaining ? perm[offset + pos] : perm[(pos - remaining) % n]);
  }
  return out;
}

std::vector<int64_t> DistributedSampler::IndicesWithoutPadding(int64_t epoch) const {
  const std::vector<int64_t> perm = Permutation(epoch);
  std::vector<int64_t> out;
  for (int64_t pos = options_.rank; pos < options_.dataset_size; pos += options_.world_size) {
    out.push_back(perm[pos]);
  }
  return out;
}

}  // namespace ddprun::trainer
