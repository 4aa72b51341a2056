// One epoch's batches for one rank: `workers` threads read, decode and transform whole batches
// ahead of the train loop, at most `prefetch` batches in flight or waiting, handed out in
// order. Which samples a rank sees (DistributedSampler sharding) is the caller's choice: it
// passes this rank's index list.
//
// A file that fails to decode (truncated, corrupt despite a valid signature) is dropped from
// its batch, counted and reported once as a warning, never fatal; such a batch is smaller.
// Thread-compatible: Next() is for one consumer thread; the workers share the state below mu_
// with it. The destructor stops and joins the workers.
#ifndef DDPRUN_TRAINER_IMAGE_INPUT_PIPELINE_H_
#define DDPRUN_TRAINER_IMAGE_INPUT_PIPELINE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "trainer/image/image_folder.h"
#include "trainer/image/image_transforms.h"

namespace ddprun::trainer {

struct ImageBatch {
  int64_t index = 0;                // batch number within this epoch's list
  int64_t size = 0;                 // images in it (fewer than requested when some failed)
  std::vector<float> images;        // size * 3 * S * S, NCHW
  std::vector<int64_t> labels;      // size
  std::vector<std::string> errors;  // "path: why" for each image dropped
};

struct PipelineOptions {
  int workers = 4;
  int prefetch = 2;  // batches decoded ahead per worker
  int64_t batch_size = 32;
  TransformOptions transform;
  uint64_t seed = 0;  // with the epoch and the sample index: the augmentation's randomness
  int64_t epoch = 0;
};

class InputPipeline {
 public:
  // `folder` must outlive this object. Starts the workers.
  InputPipeline(const ImageFolder* folder, std::vector<int64_t> indices, PipelineOptions options);
  ~InputPipeline();
  InputPipeline(const InputPipeline&) = delete;
  InputPipeline& operator=(const InputPipeline&) = delete;

  int64_t num_batches() const { return num_batches_; }
  // The next batch in order, nullopt after the last one.
  std::optional<ImageBatch> Next() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Work() ABSL_LOCKS_EXCLUDED(mu_);
  ImageBatch Build(int64_t b) const;

  const ImageFolder* folder_;
  const std::vector<int64_t> indices_;
  const PipelineOptions options_;
  const int64_t num_batches_;

  absl::Mutex mu_;
  absl::CondVar cv_;  // signalled whenever a batch is ready, the window moves or we stop
  int64_t next_to_build_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_to_hand_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, ImageBatch> ready_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IMAGE_INPUT_PIPELINE_H_
