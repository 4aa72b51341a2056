// The ResNets have torchvision's parameter counts and names (so weights map one to one) and
// classify a batch.
#include "trainer/train/resnet.h"

#include <torch/torch.h>

#include "gtest/gtest.h"

namespace ddprun::trainer {
namespace {

int64_t CountParameters(ResNet& m) {
  int64_t n = 0;
  for (const torch::Tensor& p : m->parameters()) n += p.numel();
  return n;
}

TEST(ResNetTest, TorchvisionParameterCountsAndNames) {
  // sum(p.numel() for p in torchvision.models.resnet18().parameters()), resnet50 likewise.
  absl::StatusOr<ResNet> r18 = MakeResNet("resnet18", 1000);
  ASSERT_TRUE(r18.ok());
  EXPECT_EQ(CountParameters(*r18), 11689512);
  auto named = (*r18)->named_parameters();
  for (const char* name :
       {"conv1.weight", "bn1.bias", "layer1.0.conv2.weight", "layer2.0.downsample.0.weight",
        "layer2.0.downsample.1.weight", "layer4.1.bn2.weight", "fc.weight", "fc.bias"}) {
    EXPECT_NE(named.find(name), nullptr) << name;
  }
  EXPECT_NE((*r18)->named_buffers().find("layer3.1.bn1.running_var"), nullptr);
  absl::StatusOr<ResNet> r50 = MakeResNet("resnet50", 1000);
  ASSERT_TRUE(r50.ok());
  EXPECT_EQ(CountParameters(*r50), 25557032);
  EXPECT_NE((*r50)->named_parameters().find("layer3.5.conv3.weight"), nullptr);
  EXPECT_EQ(MakeResNet("vgg16", 10).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ResNetTest, ForwardShapes) {
  torch::manual_seed(0);
  absl::StatusOr<ResNet> m = MakeResNet("resnet18", 7);
  ASSERT_TRUE(m.ok());
  (*m)->eval();
  torch::NoGradGuard no_grad;
  torch::Tensor out = (*m)->forward(torch::randn({2, 3, 64, 64}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 7}));
  EXPECT_TRUE(out.isfinite().all().item<bool>());
}

}  // namespace
}  // namespace ddprun::trainer
