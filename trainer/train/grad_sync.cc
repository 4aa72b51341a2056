#include "trainer/train/grad_sync.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ddprun::trainer {

GradientSynchronizer::GradientSynchronizer(std::vector<torch::Tensor> params, Communicator* comm,
                                           GradSyncOptions options)
    : params_(std::move(params)), comm_(comm), options_(options) {
  bucket_of_.resize(params_.size());
  slot_of_.resize(params_.size());
  seen_.assign(params_.size(), false);
  // Reverse order: the last layer's gradients are computed first.
  int64_t bucket_bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const int64_t bytes = params_[k].numel() * static_cast<int64_t>(sizeof(float));
    if (buckets_.empty() || bucket_bytes + bytes > options_.bucket_cap_bytes) {
      if (buckets_.empty() || !buckets_.back().params.empty()) buckets_.emplace_back();
      bucket_bytes = 0;
    }
    Bucket& b = buckets_.back();
    bucket_of_[k] = buckets_.size() - 1;
    slot_of_[k] = b.params.size();
    b.params.push_back(k);
    bucket_bytes += bytes;
  }
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    int64_t n = 0;
    for (size_t k : b.params) {
      b.offsets.push_back(n);
      n += params_[k].numel();
    }
    if (i + 1 == buckets_.size()) {
      control_offset_ = n;
      n += options_.control_slots;
    }
    b.flat = torch::zeros({n}, params_[b.params.front()].options().dtype(torch::kFloat32));
  }
  for (size_t k = 0; k < params_.size(); ++k) {
    hook_ids_.push_back(
        params_[k].register_hook([this, k](torch::Tensor grad) { OnGrad(k, grad); }));
  }
}

GradientSynchronizer::~GradientSynchronizer() {
  for (size_t k = 0; k < params_.size(); ++k) params_[k].remove_hook(hook_ids_[k]);
}

void GradientSynchronizer::Begin(const std::vector<float>& control) {
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int>(b.params.size());
    b.launched = false;
    b.work.reset();
  }
  seen_.assign(params_.size(), false);
  next_to_launch_ = 0;
  hook_error_ = nullptr;
  // Works for CPU and CUDA buckets alike (no raw pointer into device memory).
  std::vector<float> values(options_.control_slots, 0.0f);
  for (size_t i = 0; i < values.size() && i < control.size(); ++i) values[i] = control[i];
  buckets_.back()
      .flat.narrow(0, control_offset_, options_.control_slots)
      .copy_(torch::tensor(values, torch::kFloat32));
  armed_ = true;
}

void GradientSynchronizer::OnGrad(size_t k, const torch::Tensor& grad) {
  if (!armed_ || seen_[k]) return;  // e.g. a backward outside Begin/Finish
  try {
    Bucket& b = buckets_[bucket_of_[k]];
    const size_t slot = slot_of_[k];
    torch::NoGradGuard no_grad;
    torch::Tensor view = b.flat.narrow(0, b.offsets[slot], params_[k].numel());
    torch::mul_out(view, grad.reshape({-1}), 1.0 / comm_->world_size());
    seen_[k] = true;
    --b.pending;
    LaunchReady();
  } catch (...) {
    // An exception escaping a hook would abort backward with a confusing message; report it
    // from Finish() instead.
    if (!hook_error_) hook_error_ = std::current_exception();
  }
}

void GradientSynchronizer::Launch(Bucket& b) {
  b.work = comm_->AllReduceSumAsync(b.flat);
  b.launched = true;
}

void GradientSynchronizer::LaunchReady() {
  while (next_to_launch_ < buckets_.size() && buckets_[next_to_launch_].pending == 0) {
    Launch(buckets_[next_to_launch_++]);
  }
}

absl::Status GradientSynchronizer::Finish(std::vector<float>* control_out) {
  armed_ = false;
  try {
    if (hook_error_) std::rethrow_exception(hook_error_);
    // Parameters that got no gradient this step contribute zeros, so every rank still issues
    // the same collectives.
    for (size_t k = 0; k < params_.size(); ++k) {
      if (seen_[k]) continue;
      Bucket& b = buckets_[bucket_of_[k]];
      b.flat.narrow(0, b.offsets[slot_of_[k]], params_[k].numel()).zero_();
      seen_[k] = true;
      --b.pending;
    }
    LaunchReady();
  } catch (const std::exception& e) {
    // Drain what was launched so no collective is left running against a freed buffer (an
    // abortable waiter may give up: the works keep their buffers alive themselves).
    for (Bucket& b : buckets_) comm_->Wait(b.work).IgnoreError();
    return absl::UnavailableError(absl::StrCat("gradient all-reduce: ", e.what()));
  }
  absl::Status status;
  const auto wait_began = std::chrono::steady_clock::now();
  for (Bucket& b : buckets_) {
    absl::Status s = comm_->Wait(b.work);
    if (status.ok() && !s.ok()) status = s;
  }
  last_wait_ = std::chrono::steady_clock::now() - wait_began;
  DDPRUN_RETURN_IF_ERROR(status);
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < params_.size(); ++k) {
    Bucket& b = buckets_[bucket_of_[k]];
    torch::Tensor avg =
        b.flat.narrow(0, b.offsets[slot_of_[k]], params_[k].numel()).view(params_[k].sizes());
    if (params_[k].grad().defined()) {
      params_[k].mutable_grad().copy_(avg);
    } else {
      params_[k].mutable_grad() = avg.clone();
    }
  }
  if (control_out != nullptr) {
    torch::Tensor c =
        buckets_.back().flat.narrow(0, control_offset_, options_.control_slots).to(torch::kCPU);
    control_out->assign(c.data_ptr<float>(), c.data_ptr<float>() + options_.control_slots);
  }
  return absl::OkStatus();
}

absl::Status GradientSynchronizer::BroadcastFromRankZero(const std::vector<torch::Tensor>& tensors,
                                                         Communicator* comm) {
  if (comm->world_size() == 1 || tensors.empty()) return absl::OkStatus();
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat_parts;
  for (const torch::Tensor& t : tensors)
    flat_parts.push_back(t.detach().reshape({-1}).to(torch::kFloat32));
  torch::Tensor flat = torch::cat(flat_parts);
  DDPRUN_RETURN_IF_ERROR(comm->Broadcast(flat, 0));
  int64_t offset = 0;
  for (const torch::Tensor& t : tensors) {
    const int64_t n = t.numel();
    torch::Tensor dst = t;  // shares storage with the parameter
    dst.detach().copy_(flat.narrow(0, offset, n).view(t.sizes()));
    offset += n;
  }
  return absl::OkStatus();
}

}  // namespace ddprun::trainer
