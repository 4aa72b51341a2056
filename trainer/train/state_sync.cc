#include "trainer/train/state_sync.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "trainer/train/checkpoint_broadcast.h"

namespace ddprun::trainer {

absl::StatusOr<StateSource> AgreeOnStateSource(int64_t step, Communicator* comm,
                                               const torch::Device& device) {
  // Slots hold step + 1, so that the zeros of the other ranks' slots read as "no state".
  torch::Tensor steps = torch::zeros({comm->world_size()}, torch::kInt64);
  steps[comm->rank()] = step + 1;
  steps = steps.to(device);
  DDPRUN_RETURN_IF_ERROR(comm->AllReduceSum(steps));
  steps = steps.to(torch::kCPU);
  StateSource source;
  auto all = steps.accessor<int64_t, 1>();
  for (int r = 0; r < comm->world_size(); ++r) {
    if (all[r] - 1 > source.step) {  // strictly greater: the lowest rank wins a tie
      source.step = all[r] - 1;
      source.rank = r;
    }
  }
  return source;
}

absl::StatusOr<int64_t> SyncStateFrom(
    const StateSource& source, Communicator* comm, const torch::Device& device,
    const std::function<absl::StatusOr<std::string>()>& serialize,
    const std::function<absl::Status(absl::string_view)>& restore) {
  const bool mine = comm->rank() == source.rank;
  absl::StatusOr<std::string> payload = mine ? serialize() : std::string();
  DDPRUN_ASSIGN_OR_RETURN(
      std::string bytes, BroadcastBytes(payload, source.rank, comm, device,
                                        absl::StrCat("serialise its state of step ", source.step)));
  if (!mine) {
    absl::Status s = restore(bytes);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("the state of step ", source.step, " from rank ",
                                                 source.rank, ": ", s.message()));
    }
  }
  return static_cast<int64_t>(bytes.size());
}

StepUndo::StepUndo(const std::vector<torch::Tensor>& buffers, const torch::Device& model_device)
    : rng_(RngState::Capture(model_device)), buffers_(buffers) {
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& b : buffers_) saved_.push_back(b.detach().clone());
}

void StepUndo::Apply(const std::vector<torch::Tensor>& params) {
  rng_.Restore();
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].detach().copy_(saved_[i]);
  for (const torch::Tensor& p : params) {
    if (p.grad().defined()) p.grad().detach().zero_();
  }
}

}  // namespace ddprun::trainer
