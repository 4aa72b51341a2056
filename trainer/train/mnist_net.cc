#include "trainer/train/mnist_net.h"

#include <torch/nn/functional.h>

namespace ddprun::trainer {

namespace F = torch::nn::functional;

MnistNetImpl::MnistNetImpl() {
  // Registration order = creation order = the Python module's, so torch::manual_seed(1) gives
  // the same default (Kaiming-uniform) initial weights as the Python reference.
  conv1_ = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)));
  conv2_ = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)));
  dropout1_ = register_module("dropout1", torch::nn::Dropout(0.25));
  dropout2_ = register_module("dropout2", torch::nn::Dropout(0.5));
  fc1_ = register_module("fc1", torch::nn::Linear(9216, 128));
  fc2_ = register_module("fc2", torch::nn::Linear(128, 10));
  // Channels-last convolutions (oneDNN's native layout) are ~17% faster here than NCHW; only
  // the layout changes, not the values (initialised above in NCHW like the Python model).
  torch::NoGradGuard no_grad;
  for (torch::nn::Conv2d& conv : {std::ref(conv1_), std::ref(conv2_)}) {
    conv->weight.set_data(conv->weight.contiguous(torch::MemoryFormat::ChannelsLast));
  }
}

torch::Tensor MnistNetImpl::forward(torch::Tensor x) {
  x = torch::relu(conv1_->forward(x.contiguous(torch::MemoryFormat::ChannelsLast)));
  x = torch::relu(conv2_->forward(x));
  x = F::max_pool2d(x, F::MaxPool2dFuncOptions(2));
  x = dropout1_->forward(x);
  // fc1 computed as a 12x12 convolution over the [N, 64, 12, 12] activations with the very same
  // [128, 9216] weight viewed as [128, 64, 12, 12] (flatten order c, h, w): the same function
  // and parameters as nn.Linear, but it runs in oneDNN instead of the BLAS that LibTorch was
  // linked with. Debian's LibTorch uses the netlib reference BLAS, where this one GEMM (forward
  // and backward) took ~75% of a step; through oneDNN a step is ~4x faster.
  if (x.dim() == 4 && x.size(1) * x.size(2) * x.size(3) == fc1_->weight.size(1)) {
    x = F::conv2d(x.contiguous(),
                  fc1_->weight.view({fc1_->weight.size(0), x.size(1), x.size(2), x.size(3)}),
                  F::Conv2dFuncOptions().bias(fc1_->bias));
    x = torch::relu(torch::flatten(x, 1));
  } else {
    x = torch::relu(fc1_->forward(torch::flatten(x, 1)));
  }
  x = dropout2_->forward(x);
  return torch::log_softmax(fc2_->forward(x), /*dim=*/1);
}

}  // namespace ddprun::trainer
