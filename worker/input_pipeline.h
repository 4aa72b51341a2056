// One epoch's batches for one rank: `workers` threads read, decode and transform images ahead
// of the train loop, image by image (so all threads help with the next batch and memory stays
// at `prefetch` batches however many threads there are), handed out as batches in order. Which
// samples a rank sees (DistributedSampler sharding) is the caller's choice: it passes this rank's
// index list.
//
// A file that fails to decode (truncated, corrupt despite a valid signature) is dropped from
// its batch, counted and reported once as a warning, never fatal; such a batch is smaller.
// Next() is for one consumer thread; the destructor stops and joins the workers.
#ifndef DDPRUN_WORKER_INPUT_PIPELINE_H_
#define DDPRUN_WORKER_INPUT_PIPELINE_H_

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "worker/image_folder.h"
#include "worker/image_transforms.h"

namespace ddprun::worker {

struct ImageBatch {
  int64_t index = 0;                // batch number within this epoch's list
  int64_t size = 0;                 // images in it (fewer than requested when some failed)
  std::vector<float> images;        // size * 3 * S * S, NCHW
  std::vector<int64_t> labels;      // size
  std::vector<std::string> errors;  // "path: why" for each image dropped
};

struct PipelineOptions {
  int workers = 4;
  int prefetch = 2;  // batches being decoded or waiting (at least 1)
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
  std::optional<ImageBatch> Next();

 private:
  // A batch being filled: images land at their position; failures are compacted away when it
  // is handed out, so the order never depends on thread timing.
  struct Slot {
    ImageBatch batch;
    std::vector<char> ok;
    std::vector<std::string> errors;  // by position, empty when fine
    int64_t remaining = 0;
  };

  void Work();
  // Decodes position `i` of the index list into `out`; the error, empty when fine.
  std::string Decode(int64_t i, float* out) const;

  const ImageFolder* folder_;
  const std::vector<int64_t> indices_;
  const PipelineOptions options_;
  const int64_t num_batches_;

  std::mutex mu_;
  std::condition_variable cv_;
  int64_t next_image_ = 0;         // position in indices_; guarded by mu_
  int64_t next_to_hand_ = 0;       // guarded by mu_
  std::map<int64_t, Slot> slots_;  // by batch number; guarded by mu_ (node addresses stable)
  bool stopping_ = false;          // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace ddprun::worker

#endif  // DDPRUN_WORKER_INPUT_PIPELINE_H_
