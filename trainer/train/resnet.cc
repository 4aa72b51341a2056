#include "trainer/train/resnet.h"

#include "absl/strings/str_cat.h"

namespace ddprun::trainer {
namespace {

namespace nn = torch::nn;

nn::Conv2d Conv(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(pad).bias(false));
}

// The shortcut's projection when the shape changes: torchvision's "downsample".
nn::Sequential Downsample(int64_t in, int64_t out, int64_t stride) {
  return nn::Sequential(Conv(in, out, 1, stride, 0), nn::BatchNorm2d(out));
}

class BasicBlockImpl : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlockImpl(int64_t in, int64_t planes, int64_t stride) {
    conv1_ = register_module("conv1", Conv(in, planes, 3, stride, 1));
    bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
    conv2_ = register_module("conv2", Conv(planes, planes, 3, 1, 1));
    bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
    if (stride != 1 || in != planes) {
      downsample_ = register_module("downsample", Downsample(in, planes, stride));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor out = torch::relu(bn1_(conv1_(x)));
    out = bn2_(conv2_(out));
    out += downsample_ ? downsample_->forward(x) : x;
    return torch::relu(out);
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(BasicBlock);

class BottleneckImpl : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  BottleneckImpl(int64_t in, int64_t planes, int64_t stride) {
    conv1_ = register_module("conv1", Conv(in, planes, 1, 1, 0));
    bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
    conv2_ = register_module("conv2", Conv(planes, planes, 3, stride, 1));
    bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
    conv3_ = register_module("conv3", Conv(planes, planes * kExpansion, 1, 1, 0));
    bn3_ = register_module("bn3", nn::BatchNorm2d(planes * kExpansion));
    if (stride != 1 || in != planes * kExpansion) {
      downsample_ = register_module("downsample", Downsample(in, planes * kExpansion, stride));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor out = torch::relu(bn1_(conv1_(x)));
    out = torch::relu(bn2_(conv2_(out)));
    out = bn3_(conv3_(out));
    out += downsample_ ? downsample_->forward(x) : x;
    return torch::relu(out);
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(Bottleneck);

}  // namespace

ResNetImpl::ResNetImpl(bool bottleneck, std::vector<int> layers, int64_t num_classes)
    : bottleneck_(bottleneck) {
  conv1_ = register_module("conv1", Conv(3, 64, 7, 2, 3));
  bn1_ = register_module("bn1", nn::BatchNorm2d(64));
  layer1_ = register_module("layer1", MakeStage(64, layers[0], 1));
  layer2_ = register_module("layer2", MakeStage(128, layers[1], 2));
  layer3_ = register_module("layer3", MakeStage(256, layers[2], 2));
  layer4_ = register_module("layer4", MakeStage(512, layers[3], 2));
  fc_ = register_module("fc", nn::Linear(inplanes_, num_classes));
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* conv = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = m->as<nn::BatchNorm2d>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    }
  }
}

nn::Sequential ResNetImpl::MakeStage(int64_t planes, int blocks, int64_t stride) {
  nn::Sequential stage;
  for (int i = 0; i < blocks; ++i) {
    const int64_t s = i == 0 ? stride : 1;
    if (bottleneck_) {
      stage->push_back(Bottleneck(inplanes_, planes, s));
      inplanes_ = planes * BottleneckImpl::kExpansion;
    } else {
      stage->push_back(BasicBlock(inplanes_, planes, s));
      inplanes_ = planes * BasicBlockImpl::kExpansion;
    }
  }
  return stage;
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  x = torch::relu(bn1_(conv1_(x)));
  x = torch::max_pool2d(x, 3, 2, 1);
  x = layer4_->forward(layer3_->forward(layer2_->forward(layer1_->forward(x))));
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  return fc_(x);
}

absl::StatusOr<ResNet> MakeResNet(const std::string& arch, int64_t num_classes) {
  if (arch == "resnet18") return ResNet(false, std::vector<int>{2, 2, 2, 2}, num_classes);
  if (arch == "resnet50") return ResNet(true, std::vector<int>{3, 4, 6, 3}, num_classes);
  return absl::InvalidArgumentError(
      absl::StrCat("--arch ", arch, ": not one of resnet18, resnet50"));
}

}  // namespace ddprun::trainer
