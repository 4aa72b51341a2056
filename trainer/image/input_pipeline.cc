#include "trainer/image/input_pipeline.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ddprun::trainer {

InputPipeline::InputPipeline(const ImageFolder* folder, std::vector<int64_t> indices,
                             PipelineOptions options)
    : folder_(folder),
      indices_(std::move(indices)),
      options_(options),
      num_batches_((static_cast<int64_t>(indices_.size()) + options.batch_size - 1) /
                   options.batch_size) {
  const int n = std::max(1, options_.workers);
  threads_.reserve(n);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Work(); });
}

InputPipeline::~InputPipeline() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  for (std::thread& t : threads_) t.join();
}

void InputPipeline::Work() {
  // Bounded look-ahead: a worker takes batch b only while b is within the window after the
  // consumer's position, so memory stays at workers * prefetch batches whatever the speed.
  const int64_t window = std::max(1, options_.workers) * std::max(1, options_.prefetch);
  for (;;) {
    int64_t b;
    {
      absl::MutexLock lock(&mu_);
      while (!(stopping_ || next_to_build_ >= num_batches_ ||
               next_to_build_ < next_to_hand_ + window)) {
        cv_.Wait(&mu_);
      }
      if (stopping_ || next_to_build_ >= num_batches_) return;
      b = next_to_build_++;
    }
    ImageBatch batch = Build(b);
    {
      absl::MutexLock lock(&mu_);
      ready_.emplace(b, std::move(batch));
    }
    cv_.SignalAll();
  }
}

ImageBatch InputPipeline::Build(int64_t b) const {
  const int64_t begin = b * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, indices_.size());
  const int size = options_.transform.size;
  const size_t per_image = 3 * static_cast<size_t>(size) * size;
  ImageBatch batch;
  batch.index = b;
  batch.images.resize(per_image * (end - begin));
  batch.labels.reserve(end - begin);
  for (int64_t i = begin; i < end; ++i) {
    const ImageSample& sample = folder_->samples[indices_[i]];
    std::mt19937_64 rng = SampleRng(options_.seed, options_.epoch, indices_[i]);
    absl::StatusOr<std::string> bytes = ReadFileBytes(sample.path);
    absl::Status s = bytes.status();
    if (s.ok()) {
      s = DecodeAndTransform(*bytes, sample.format, options_.transform, rng,
                             batch.images.data() + per_image * batch.size);
    }
    if (!s.ok()) {
      batch.errors.push_back(absl::StrCat(sample.path, ": ", s.message()));
      continue;
    }
    batch.labels.push_back(sample.label);
    ++batch.size;
  }
  batch.images.resize(per_image * batch.size);
  return batch;
}

std::optional<ImageBatch> InputPipeline::Next() {
  absl::ReleasableMutexLock lock(&mu_);
  if (next_to_hand_ >= num_batches_) return std::nullopt;
  while (ready_.count(next_to_hand_) == 0) cv_.Wait(&mu_);
  auto it = ready_.find(next_to_hand_);
  ImageBatch batch = std::move(it->second);
  ready_.erase(it);
  ++next_to_hand_;
  lock.Release();
  cv_.SignalAll();  // the window moved
  return batch;
}

}  // namespace ddprun::trainer
