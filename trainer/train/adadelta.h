// Adadelta (Zeiler 2012) exactly as torch.optim.Adadelta's single-tensor path computes it
// (torch 1.13 optim/adadelta.py); LibTorch's C++ frontend has no Adadelta. Defaults are
// torch's: lr 1.0, rho 0.9, eps 1e-6, weight decay 0.
#ifndef DDPRUN_TRAINER_TRAIN_ADADELTA_H_
#define DDPRUN_TRAINER_TRAIN_ADADELTA_H_

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/types.h>

#include <vector>

#include "absl/status/status.h"

namespace ddprun::trainer {

struct AdadeltaOptions {
  double lr = 1.0;
  double rho = 0.9;
  double eps = 1e-6;
  double weight_decay = 0.0;
};

// Owns its state tensors; shares the parameters with the model. Not thread-safe.
class Adadelta {
 public:
  Adadelta(std::vector<torch::Tensor> params, AdadeltaOptions options);

  // Drops the gradients (like zero_grad(set_to_none=True)); the next backward allocates fresh.
  void ZeroGrad();
  // One update from the current .grad() of every parameter (parameters without one are skipped).
  void Step();

  double lr() const { return options_.lr; }
  void set_lr(double lr) { options_.lr = lr; }
  int64_t steps() const { return steps_; }

  // State under "optimizer/..." in the archive.
  void Save(torch::serialize::OutputArchive& archive) const;
  // kInvalidArgument when the archive's state does not match these parameters' shapes.
  absl::Status Load(torch::serialize::InputArchive& archive);

 private:
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> square_avg_;
  std::vector<torch::Tensor> acc_delta_;
  AdadeltaOptions options_;
  int64_t steps_ = 0;
};

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_ADADELTA_H_
