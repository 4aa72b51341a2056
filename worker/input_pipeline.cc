#include "worker/input_pipeline.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ddprun::worker {

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
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void InputPipeline::Work() {
  const int64_t n = static_cast<int64_t>(indices_.size());
  const int64_t B = options_.batch_size;
  const size_t per_image = 3 * static_cast<size_t>(options_.transform.size) *
                           static_cast<size_t>(options_.transform.size);
  const int64_t window = std::max(1, options_.prefetch);
  for (;;) {
    int64_t i;
    Slot* slot;
    float* out;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Bounded look-ahead: position i may start only while its batch is within the window.
      cv_.wait(lock, [&] {
        return stopping_ || next_image_ >= n || next_image_ / B < next_to_hand_ + window;
      });
      if (stopping_ || next_image_ >= n) return;
      i = next_image_++;
      const int64_t b = i / B;
      slot = &slots_[b];
      if (slot->remaining == 0 && slot->ok.empty()) {
        const int64_t count = std::min(B, n - b * B);
        slot->batch.index = b;
        slot->batch.images.resize(per_image * count);
        slot->batch.labels.resize(count);
        slot->ok.assign(count, 0);
        slot->errors.resize(count);
        slot->remaining = count;
      }
      // The vectors were sized once above and are not touched until the batch is complete.
      out = slot->batch.images.data() + per_image * (i - b * B);
    }
    std::string error = Decode(i, out);
    bool complete;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const int64_t k = i - (i / B) * B;
      slot->ok[k] = error.empty();
      slot->batch.labels[k] = folder_->samples[indices_[i]].label;
      slot->errors[k] = std::move(error);
      complete = --slot->remaining == 0;
    }
    if (complete) cv_.notify_all();
  }
}

std::string InputPipeline::Decode(int64_t i, float* out) const {
  const ImageSample& sample = folder_->samples[indices_[i]];
  std::mt19937_64 rng = SampleRng(options_.seed, options_.epoch, indices_[i]);
  absl::StatusOr<std::string> bytes = ReadFileBytes(sample.path);
  absl::Status s = bytes.status();
  if (s.ok()) s = DecodeAndTransform(*bytes, sample.format, options_.transform, rng, out);
  return s.ok() ? "" : absl::StrCat(sample.path, ": ", s.message());
}

std::optional<ImageBatch> InputPipeline::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  if (next_to_hand_ >= num_batches_) return std::nullopt;
  cv_.wait(lock, [&] {
    auto it = slots_.find(next_to_hand_);
    return it != slots_.end() && !it->second.ok.empty() && it->second.remaining == 0;
  });
  auto it = slots_.find(next_to_hand_);
  Slot slot = std::move(it->second);
  slots_.erase(it);
  ++next_to_hand_;
  lock.unlock();
  cv_.notify_all();  // the window moved

  // Drop the images that failed, keeping the others in order.
  ImageBatch& batch = slot.batch;
  const size_t per_image = 3 * static_cast<size_t>(options_.transform.size) *
                           static_cast<size_t>(options_.transform.size);
  for (size_t k = 0; k < slot.ok.size(); ++k) {
    if (!slot.ok[k]) {
      batch.errors.push_back(std::move(slot.errors[k]));
      continue;
    }
    if (static_cast<int64_t>(k) != batch.size) {
      std::copy_n(batch.images.begin() + per_image * k, per_image,
                  batch.images.begin() + per_image * batch.size);
      batch.labels[batch.size] = batch.labels[k];
    }
    ++batch.size;
  }
  batch.images.resize(per_image * batch.size);
  batch.labels.resize(batch.size);
  return batch;
}

}  // namespace ddprun::worker
