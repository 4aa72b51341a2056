// The random generators a training step draws from: the CPU's default generator, and the
// default generator of the GPU the model is on (dropout on a CUDA tensor draws there, not from
// the CPU's). A checkpoint, the state a rank hands to replacements and the undo of a step cut
// short save and restore them together, so that a run resumed on a GPU continues bit for bit.
#ifndef DDPRUN_TRAINER_TRAIN_RNG_STATE_H_
#define DDPRUN_TRAINER_TRAIN_RNG_STATE_H_

#include <torch/serialize/archive.h>
#include <torch/types.h>

#include <optional>

namespace ddprun::trainer {

class RngState {
 public:
  // The generators of a model on `model_device` (the CPU's alone for a CPU model).
  static RngState Capture(const torch::Device& model_device);
  // `archive`'s states ("rng/cpu", and "rng/cuda" when the model is on a GPU and the archive
  // was written on one); nullopt when it lacks the CPU state.
  static std::optional<RngState> Read(torch::serialize::InputArchive& archive,
                                      const torch::Device& model_device);

  void Write(torch::serialize::OutputArchive& archive) const;
  // Puts the captured states back into the generators they came from.
  void Restore() const;

 private:
  torch::Device device_{torch::kCPU};
  torch::Tensor cpu_;
  torch::Tensor gpu_;  // undefined: none captured (CPU model, or a checkpoint made on the CPU)
};

// The device of `params` (the first one's; the CPU when there is none).
torch::Device DeviceOf(const std::vector<torch::Tensor>& params);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_RNG_STATE_H_
