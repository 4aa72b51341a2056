// DistributedDataParallel's gradient path without the Python: parameters are grouped into
// buckets in reverse registration order (the order backward produces their gradients); an
// autograd hook per parameter copies its gradient, pre-divided by the world size, into its
// bucket, and a bucket's sum all-reduce starts as soon as its last gradient arrived, while
// backward continues with earlier layers. Buckets are launched strictly in index order so every
// rank issues the same sequence of collectives. Finish() waits and writes the averaged
// gradients back into each parameter's .grad().
//
// The last bucket also carries a few "control" floats that are summed, not averaged: the train
// loop uses them to agree on a stop request (a signal on any rank) and the step's loss without
// an extra collective per step.
//
// Usage per step: Begin(control) ; loss.backward() ; Finish() ; optimizer step.
// Not thread-safe; the hooks run on the thread that calls backward() (CPU autograd).
#ifndef DDPRUN_TRAINER_TRAIN_GRAD_SYNC_H_
#define DDPRUN_TRAINER_TRAIN_GRAD_SYNC_H_

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "trainer/train/comm.h"

namespace ddprun::trainer {

struct GradSyncOptions {
  int64_t bucket_cap_bytes = 1 << 20;  // a larger parameter gets a bucket of its own
  int control_slots = 2;
};

class GradientSynchronizer {
 public:
  // `params` must outlive this object; `comm` is not owned.
  GradientSynchronizer(std::vector<torch::Tensor> params, Communicator* comm,
                       GradSyncOptions options = {});
  ~GradientSynchronizer();  // removes the hooks
  GradientSynchronizer(const GradientSynchronizer&) = delete;
  GradientSynchronizer& operator=(const GradientSynchronizer&) = delete;

  // Arms the hooks for one backward pass; `control` (control_slots values) is summed across
  // ranks along with the gradients.
  void Begin(const std::vector<float>& control);
  // Launches any bucket not yet launched (a parameter without a gradient counts as zero),
  // waits for all of them, copies the averaged gradients into .grad(). The summed control
  // values in `control_out`. Errors (a peer died) as a Status.
  absl::Status Finish(std::vector<float>* control_out);

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // How long the last Finish waited for the all-reduces: the part of the step this rank spent
  // waiting for the others (and the wire) rather than computing.
  std::chrono::nanoseconds last_wait() const { return last_wait_; }

  // Rank 0's parameters (and `buffers`) to every rank, so all start identical.
  static absl::Status BroadcastFromRankZero(const std::vector<torch::Tensor>& tensors,
                                            Communicator* comm);

 private:
  struct Bucket {
    std::vector<size_t> params;    // indices into params_
    std::vector<int64_t> offsets;  // element offset of each in `flat`
    torch::Tensor flat;            // float32, plus control slots in the last bucket
    int pending = 0;               // gradients still missing in this step
    c10::intrusive_ptr<c10d::Work> work;
    bool launched = false;
  };

  void OnGrad(size_t param_index, const torch::Tensor& grad);
  void LaunchReady();  // launches ready buckets in index order
  void Launch(Bucket& b);

  std::vector<torch::Tensor> params_;
  Communicator* comm_;
  GradSyncOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // per parameter
  std::vector<size_t> slot_of_;    // per parameter: index within its bucket
  std::vector<bool> seen_;         // per parameter: gradient arrived in this step
  std::vector<unsigned> hook_ids_;
  size_t next_to_launch_ = 0;
  bool armed_ = false;
  std::chrono::nanoseconds last_wait_{0};
  int64_t control_offset_ = 0;  // in the last bucket
  std::exception_ptr hook_error_;
};

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_GRAD_SYNC_H_
