// Resuming, shared by every trainer. The distributed half: rank 0 reads the newest valid
// checkpoint from its CheckpointStore and broadcasts the bytes, so all ranks load the same state
// even when the checkpoint directory is not shared between nodes. What the bytes mean (which
// model, which optimizer) stays with each trainer. The byte broadcast itself, from any rank,
// serves in-process recovery's state agreement too (state_sync.h).
#ifndef DDPRUN_TRAINER_TRAIN_CHECKPOINT_BROADCAST_H_
#define DDPRUN_TRAINER_TRAIN_CHECKPOINT_BROADCAST_H_

#include <torch/types.h>

#include <optional>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/io/checkpoint_store.h"
#include "trainer/train/comm.h"
#include "trainer/train/train_options.h"  // ResumeMode

namespace ddprun::trainer {

// Collective: `root`'s bytes to every rank. On `root`, `payload` holds the bytes or the error
// that kept it from having them; then `root` returns that error and every other rank kDataLoss
// "rank <root> could not <what>", so nobody waits for bytes that never come. A receiver takes
// at most `max_bytes` (nullopt: the memory it has available, memory_bound.h): a larger size
// announced by the root is kResourceExhausted before anything is allocated.
absl::StatusOr<std::string> BroadcastBytes(const absl::StatusOr<std::string>& payload, int root,
                                           Communicator* comm, const torch::Device& device,
                                           absl::string_view what,
                                           std::optional<int64_t> max_bytes = std::nullopt);

// Collective: every rank calls it. `store` and `read` matter on rank 0 only (nullptr or false:
// nothing to read). Returns the payload on every rank, nullopt when there is no checkpoint, or
// an error on every rank when rank 0 could not read one (kDataLoss on the others). Rank 0 logs
// what it read and any skipped (torn, corrupt) file to `log`.
absl::StatusOr<std::optional<std::string>> ReadCheckpointOnAllRanks(CheckpointStore* store,
                                                                    bool read, Communicator* comm,
                                                                    const torch::Device& device,
                                                                    std::ostream& log);

// Rank 0's checks before the first step, shared by every trainer: the directory `dir` of
// `store` is writable (a run must not train for hours towards a save that cannot happen), and
// it agrees with --resume (a checkpoint must be there) or --no-resume (none may be).
absl::Status CheckCheckpointDirectory(CheckpointStore* store, const std::string& dir,
                                      ResumeMode mode);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_CHECKPOINT_BROADCAST_H_
