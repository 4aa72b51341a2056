#include "trainer/train/checkpoint_broadcast.h"

#include <torch/torch.h>

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace ddprun::trainer {

absl::StatusOr<std::optional<std::string>> ReadCheckpointOnAllRanks(CheckpointStore* store,
                                                                    bool read, Communicator* comm,
                                                                    const torch::Device& device,
                                                                    std::ostream& log) {
  const bool leader = comm->rank() == 0;
  std::string payload;
  absl::Status leader_status;
  if (leader && store != nullptr && read) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::optional<LoadedCheckpoint>> loaded = store->LoadLatest();
    if (!loaded.ok()) {
      leader_status = loaded.status();
    } else if (loaded->has_value()) {
      for (const std::string& w : (*loaded)->warnings) log << "warning: " << w << std::endl;
      payload = std::move((*loaded)->payload);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      log << absl::StrFormat("checkpoint: read %s (step %d, %.1f MB) in %.1f ms", (*loaded)->path,
                             (*loaded)->step, payload.size() / 1e6, ms)
          << std::endl;
    }
  }
  // Size first; -1 tells the other ranks that rank 0 failed, so nobody waits for bytes.
  torch::Tensor size =
      torch::tensor({leader_status.ok() ? static_cast<int64_t>(payload.size()) : int64_t{-1}})
          .to(device);
  DDPRUN_RETURN_IF_ERROR(comm->Broadcast(size, 0));
  const int64_t n = size.item<int64_t>();
  DDPRUN_RETURN_IF_ERROR(leader_status);
  if (n < 0) return absl::DataLossError("rank 0 could not read a valid checkpoint");
  if (n == 0) return std::optional<std::string>();
  torch::Tensor bytes = torch::empty({n}, torch::kUInt8);
  if (leader) std::memcpy(bytes.data_ptr<uint8_t>(), payload.data(), static_cast<size_t>(n));
  bytes = bytes.to(device);
  DDPRUN_RETURN_IF_ERROR(comm->Broadcast(bytes, 0));
  bytes = bytes.to(torch::kCPU);
  return std::optional<std::string>(std::string(
      reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(n)));
}

absl::Status CheckCheckpointDirectory(CheckpointStore* store, const std::string& dir,
                                      ResumeMode mode) {
  DDPRUN_RETURN_IF_ERROR(store->CheckWritable());
  if (mode == ResumeMode::kNever && store->HasCheckpoint()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--no-resume but ", dir, " already holds checkpoints; use an empty directory"));
  }
  if (mode == ResumeMode::kAlways && !store->HasCheckpoint()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--resume but ", dir, " holds no checkpoint"));
  }
  return absl::OkStatus();
}

}  // namespace ddprun::trainer
