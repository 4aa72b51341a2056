#include "trainer/train/checkpoint_broadcast.h"

#include <torch/torch.h>

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "trainer/io/memory_bound.h"

namespace ddprun::trainer {

namespace {

// What a receiver takes at most: `max_bytes`, else the memory this process has.
MemoryBound ReceiveBound(std::optional<int64_t> max_bytes) {
  if (max_bytes.has_value()) return {*max_bytes, "the caller's limit"};
  std::optional<MemoryBound> memory = AvailableMemory();
  return memory.has_value() ? *memory : MemoryBound{int64_t{1} << 40, "1 TiB"};
}

}  // namespace

absl::StatusOr<std::string> BroadcastBytes(const absl::StatusOr<std::string>& payload, int root,
                                           Communicator* comm, const torch::Device& device,
                                           absl::string_view what,
                                           std::optional<int64_t> max_bytes) {
  const bool mine = comm->rank() == root;
  // Size first; -1 tells the other ranks that the root failed, so nobody waits for bytes.
  const int64_t root_size =
      !mine ? 0 : (payload.ok() ? static_cast<int64_t>(payload->size()) : int64_t{-1});
  torch::Tensor size = torch::tensor({root_size}).to(device);
  DDPRUN_RETURN_IF_ERROR(comm->Broadcast(size, root));
  const int64_t n = size.item<int64_t>();
  if (mine && !payload.ok()) return payload.status();
  if (n < 0) return absl::DataLossError(absl::StrCat("rank ", root, " could not ", what));
  if (n == 0) return std::string();
  if (!mine) {
    // The size is the root's word: check it before allocating what it says.
    const MemoryBound bound = ReceiveBound(max_bytes);
    if (n > bound.bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("rank ", root, " announces ", n,
                                                       " bytes, more than this process takes (",
                                                       bound.bytes, " bytes: ", bound.what, ")"));
    }
  }
  if (mine) {
    // The root has its bytes already; it only sends them.
    torch::Tensor bytes = torch::from_blob(const_cast<char*>(payload->data()), {n}, torch::kUInt8)
                              .to(device, /*non_blocking=*/false, /*copy=*/true);
    DDPRUN_RETURN_IF_ERROR(comm->Broadcast(bytes, root));
    return *payload;
  }
  torch::Tensor bytes = torch::empty({n}, torch::kUInt8).to(device);
  DDPRUN_RETURN_IF_ERROR(comm->Broadcast(bytes, root));
  bytes = bytes.to(torch::kCPU);
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                     static_cast<size_t>(n));
}

absl::StatusOr<std::optional<std::string>> ReadCheckpointOnAllRanks(CheckpointStore* store,
                                                                    bool read, Communicator* comm,
                                                                    const torch::Device& device,
                                                                    std::ostream& log) {
  absl::StatusOr<std::string> payload = std::string();  // empty: no checkpoint
  if (comm->rank() == 0 && store != nullptr && read) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::optional<LoadedCheckpoint>> loaded = store->LoadLatest();
    if (!loaded.ok()) {
      payload = loaded.status();
    } else if (loaded->has_value()) {
      for (const std::string& w : (*loaded)->warnings) log << "warning: " << w << std::endl;
      payload = std::move((*loaded)->payload);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      log << absl::StrFormat("checkpoint: read %s (step %d, %.1f MB) in %.1f ms", (*loaded)->path,
                             (*loaded)->step, payload->size() / 1e6, ms)
          << std::endl;
    }
  }
  DDPRUN_ASSIGN_OR_RETURN(std::string bytes,
                          BroadcastBytes(payload, 0, comm, device, "read a valid checkpoint"));
  if (bytes.empty()) return std::optional<std::string>();
  return std::optional<std::string>(std::move(bytes));
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
