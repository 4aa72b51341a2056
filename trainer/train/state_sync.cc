#include "trainer/train/state_sync.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "trainer/train/checkpoint_broadcast.h"

namespace ddprun::trainer {

StateSource ChooseStateSource(const std::vector<StateClaim>& claims, int64_t max_step_lead) {
  constexpr int64_t kMaxStep = int64_t{1} << 62;
  const int n = static_cast<int>(claims.size());
  std::vector<bool> refused(n, false);
  StateSource out;
  for (int r = 0; r < n; ++r) {
    if (claims[r].step < -1 || claims[r].step > kMaxStep) {
      refused[r] = true;
      out.refused.emplace_back(r, absl::StrCat("an invalid claim (step ", claims[r].step, ")"));
    }
  }
  while (true) {
    int src = -1;
    for (int r = 0; r < n; ++r) {
      // Strictly greater: the lowest rank wins a tie.
      if (!refused[r] && claims[r].step >= 0 && (src < 0 || claims[r].step > claims[src].step)) {
        src = r;
      }
    }
    if (src < 0) return out;  // nobody holds state
    const int64_t top = claims[src].step;
    bool backed = false;
    int best_survivor = -1;
    for (int r = 0; r < n; ++r) {
      if (r == src || refused[r]) continue;
      backed = backed || claims[r].step >= top - max_step_lead;
      if (claims[r].survivor &&
          (best_survivor < 0 || claims[r].step > claims[best_survivor].step)) {
        best_survivor = r;
      }
    }
    if (backed || best_survivor < 0) {
      out.rank = src;
      out.step = top;
      return out;
    }
    refused[src] = true;
    out.refused.emplace_back(
        src, absl::StrCat("claims step ", top, ", more than ", max_step_lead,
                          " ahead of every other rank (rank ", best_survivor,
                          ", a survivor, holds step ", claims[best_survivor].step, ")"));
  }
}

absl::StatusOr<StateSource> AgreeOnStateSource(const StateClaim& mine, Communicator* comm,
                                               const torch::Device& device) {
  torch::Tensor claim =
      torch::tensor({mine.step, int64_t{mine.survivor ? 1 : 0}}, torch::kInt64).to(device);
  DDPRUN_ASSIGN_OR_RETURN(std::vector<torch::Tensor> all, comm->AllGather(claim));
  std::vector<StateClaim> claims;
  for (const torch::Tensor& t : all) {
    const torch::Tensor c = t.to(torch::kCPU);
    claims.push_back({c[0].item<int64_t>(), c[1].item<int64_t>() != 0});
  }
  return ChooseStateSource(claims, kMaxStepLead);
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
