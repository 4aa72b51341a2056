#include "trainer/train/adadelta.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"

namespace ddprun::trainer {

Adadelta::Adadelta(std::vector<torch::Tensor> params, AdadeltaOptions options)
    : params_(std::move(params)), options_(options) {
  for (const torch::Tensor& p : params_) {
    square_avg_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    acc_delta_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
  }
}

void Adadelta::ZeroGrad() {
  for (torch::Tensor& p : params_) p.mutable_grad().reset();
}

void Adadelta::Step() {
  torch::NoGradGuard no_grad;
  const double rho = options_.rho;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    torch::Tensor grad = p.grad();
    if (options_.weight_decay != 0) grad = grad.add(p, options_.weight_decay);
    // Same operation order as torch.optim.adadelta._single_tensor_adadelta.
    square_avg_[i].mul_(rho).addcmul_(grad, grad, 1 - rho);
    torch::Tensor std = square_avg_[i].add(options_.eps).sqrt_();
    torch::Tensor delta = acc_delta_[i].add(options_.eps).sqrt_().div_(std).mul_(grad);
    acc_delta_[i].mul_(rho).addcmul_(delta, delta, 1 - rho);
    p.add_(delta, -options_.lr);
  }
  ++steps_;
}

void Adadelta::Save(torch::serialize::OutputArchive& archive) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    archive.write(absl::StrCat("optimizer/square_avg/", i), square_avg_[i], /*is_buffer=*/true);
    archive.write(absl::StrCat("optimizer/acc_delta/", i), acc_delta_[i], /*is_buffer=*/true);
  }
  archive.write("optimizer/steps", torch::tensor(steps_, torch::kInt64), true);
  archive.write("optimizer/lr", torch::tensor(options_.lr, torch::kFloat64), true);
}

absl::Status Adadelta::Load(torch::serialize::InputArchive& archive) {
  std::vector<torch::Tensor> sq(params_.size()), acc(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    for (auto [name, out] : {std::pair{"square_avg", &sq[i]}, std::pair{"acc_delta", &acc[i]}}) {
      const std::string key = absl::StrCat("optimizer/", name, "/", i);
      if (!archive.try_read(key, *out, true)) {
        return absl::InvalidArgumentError(absl::StrCat("optimizer state has no ", key));
      }
      if (!out->sizes().equals(params_[i].sizes())) {
        return absl::InvalidArgumentError(absl::StrCat("optimizer state ", key, " has shape ",
                                                       c10::str(out->sizes()), ", parameter has ",
                                                       c10::str(params_[i].sizes())));
      }
    }
  }
  torch::Tensor steps, lr;
  if (!archive.try_read("optimizer/steps", steps, true) ||
      !archive.try_read("optimizer/lr", lr, true)) {
    return absl::InvalidArgumentError("optimizer state lacks steps / lr");
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    square_avg_[i].copy_(sq[i]);
    acc_delta_[i].copy_(acc[i]);
  }
  steps_ = steps.item<int64_t>();
  options_.lr = lr.item<double>();
  return absl::OkStatus();
}

}  // namespace ddprun::trainer
