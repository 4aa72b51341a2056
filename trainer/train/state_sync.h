// In-process recovery's state agreement (docs/design.md §6b.3), and the undo of a step that a
// failure cut short (§6b.5): after a new round's group forms, every rank says which global step
// its state belongs to; the lowest rank with the highest step that can be true is the source,
// and every other rank takes the source's state (the checkpoint payload) by broadcast, exactly
// as it would from a checkpoint. What the payload means stays with each trainer
// (Serialize/Restore).
#ifndef DDPRUN_TRAINER_TRAIN_STATE_SYNC_H_
#define DDPRUN_TRAINER_TRAIN_STATE_SYNC_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/train/comm.h"
#include "trainer/train/rng_state.h"

namespace ddprun::trainer {

// What one rank says of its state: a claim, which its peers check.
struct StateClaim {
  int64_t step = -1;      // its last completed global step; -1: no state
  bool survivor = false;  // it took part in an earlier round of this process's life
};

struct StateSource {
  int rank = -1;      // -1: no rank holds state (the first round)
  int64_t step = -1;  // the source's last completed global step
  // Ranks whose claim could not be true, and why (every rank computes the same list).
  std::vector<std::pair<int, std::string>> refused;
};

// Every step all-reduces, so a survivor cannot be more than this many steps ahead of every other
// survivor (it cannot finish step s+2's all-reduce before every rank finished step s+1).
inline constexpr int64_t kMaxStepLead = 1;

// Pure: the source, from every rank's claim in rank order: the lowest rank with the highest
// step, unless that step is more than `max_step_lead` ahead of every other rank's while another
// survivor is there to contradict it (then refused, and the next claim is tried). A claim
// outside [-1, 2^62] is refused too. A rank that is the only survivor, or whose claim another
// rank backs, cannot be contradicted and is taken.
StateSource ChooseStateSource(const std::vector<StateClaim>& claims, int64_t max_step_lead);

// Collective: every rank's claim (an all-gather: each rank's part comes from that rank alone),
// then ChooseStateSource on every rank, which therefore picks the same source.
absl::StatusOr<StateSource> AgreeOnStateSource(const StateClaim& mine, Communicator* comm,
                                               const torch::Device& device);

// Collective: `serialize` runs on the source, its bytes go to every rank, and every other rank
// hands them to `restore`. Returns the payload's size in bytes.
absl::StatusOr<int64_t> SyncStateFrom(
    const StateSource& source, Communicator* comm, const torch::Device& device,
    const std::function<absl::StatusOr<std::string>()>& serialize,
    const std::function<absl::Status(absl::string_view)>& restore);

// What a train step changes before its optimizer update, saved at the step's start so that a
// step abandoned by a failure leaves the state of the last completed step: the generators
// dropout draws from (rng_state.h) and the model's buffers (BatchNorm statistics updated by the
// forward). The parameters and the optimizer change only in the update itself, after the
// gradient all-reduce succeeded.
class StepUndo {
 public:
  // Copies the generator states of a model on `model_device` and `buffers` (cheap next to a
  // step: no parameters).
  StepUndo(const std::vector<torch::Tensor>& buffers, const torch::Device& model_device);
  // Puts both back, and zeroes `params`' gradients: they hold this rank's unsynchronised ones.
  void Apply(const std::vector<torch::Tensor>& params);

 private:
  RngState rng_;
  std::vector<torch::Tensor> buffers_, saved_;
};

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_STATE_SYNC_H_
