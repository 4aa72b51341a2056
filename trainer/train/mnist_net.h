// The classic PyTorch MNIST example network (examples/mnist/main.py), module and parameter
// names identical to the Python one ("conv1.weight", ...):
// conv 1->32 3x3, relu, conv 32->64 3x3, relu, max-pool 2, dropout 0.25, flatten,
// fc 9216->128, relu, dropout 0.5, fc 128->10, log-softmax.
#ifndef DDPRUN_TRAINER_TRAIN_MNIST_NET_H_
#define DDPRUN_TRAINER_TRAIN_MNIST_NET_H_

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace ddprun::trainer {

class MnistNetImpl : public torch::nn::Module {
 public:
  MnistNetImpl();
  // x: [N, 1, 28, 28] float, normalised. Returns [N, 10] log-probabilities.
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::Conv2d conv2_{nullptr};
  torch::nn::Dropout dropout1_{nullptr};
  torch::nn::Dropout dropout2_{nullptr};
  torch::nn::Linear fc1_{nullptr};
  torch::nn::Linear fc2_{nullptr};
};
TORCH_MODULE(MnistNet);

// The model's identity in checkpoints, so one of another model is refused.
inline constexpr char kMnistNetName[] = "mnist_net_v1";

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_MNIST_NET_H_
