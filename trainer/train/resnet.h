// ResNet-18 and ResNet-50 with torchvision's layout and parameter names (conv1, bn1,
// layer1.0.conv1, ..., fc), so a state dict maps one to one. BasicBlock for 18, Bottleneck
// (stride on the 3x3 conv, "ResNet v1.5") for 50; Kaiming-normal conv init, BatchNorm 1/0.
#ifndef DDPRUN_TRAINER_TRAIN_RESNET_H_
#define DDPRUN_TRAINER_TRAIN_RESNET_H_

#include <torch/torch.h>

#include <string>

#include "absl/status/statusor.h"

namespace ddprun::trainer {

class ResNetImpl : public torch::nn::Module {
 public:
  // `bottleneck`: Bottleneck blocks (expansion 4) instead of BasicBlocks; `layers`: blocks per
  // stage.
  ResNetImpl(bool bottleneck, std::vector<int> layers, int64_t num_classes);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Sequential MakeStage(int64_t planes, int blocks, int64_t stride);

  bool bottleneck_;
  int64_t inplanes_ = 64;
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  torch::nn::Sequential layer1_{nullptr}, layer2_{nullptr}, layer3_{nullptr}, layer4_{nullptr};
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(ResNet);

// "resnet18" or "resnet50"; kInvalidArgument otherwise.
absl::StatusOr<ResNet> MakeResNet(const std::string& arch, int64_t num_classes);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_RESNET_H_
