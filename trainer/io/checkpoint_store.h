// A directory of checksummed checkpoint files with a pointer to the newest one.
//
// Layout of <dir>:
//   ckpt-<step, 12 digits>.ddpt   one checkpoint each; written as .tmp, fsynced, renamed
//   LATEST                        the file name of the newest complete checkpoint (atomic too)
// File format (all integers little-endian):
//   "DDPTCKPT" | u32 version | u64 step | u64 payload length | payload | u32 CRC32
// where the CRC covers version..payload, so a torn (short) file or a flipped bit is detected.
//
// Save() never touches an older checkpoint before the new one is durable, so a failure at any
// point (full disk, crash) leaves the previous checkpoint valid. Load() takes the newest valid
// checkpoint and reports every skipped (torn / corrupt) one as a warning.
// Not thread-safe; one writer (rank 0) per directory.
#ifndef DDPRUN_TRAINER_IO_CHECKPOINT_STORE_H_
#define DDPRUN_TRAINER_IO_CHECKPOINT_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/io/file_env.h"

namespace ddprun::trainer {

struct LoadedCheckpoint {
  int64_t step = 0;
  std::string path;
  std::string payload;
  std::vector<std::string> warnings;  // one line per skipped file
};

class CheckpointStore {
 public:
  // `keep` >= 1: how many checkpoints survive pruning. `env` is not owned.
  CheckpointStore(std::string dir, int keep, FileEnv* env = FileEnv::Default());

  const std::string& dir() const { return dir_; }

  // Creates the directory and proves it writable (writes, syncs and removes a probe file).
  absl::Status CheckWritable();

  // Writes checkpoint `step` atomically, moves LATEST to it and prunes beyond `keep`. On error
  // nothing older is touched; the temp file is removed.
  absl::Status Save(int64_t step, absl::string_view payload);

  // True when the directory holds at least one checkpoint file (valid or not).
  bool HasCheckpoint();

  // The newest valid checkpoint, nullopt when there is none (an empty or missing directory).
  // kDataLoss when files exist but none is valid.
  absl::StatusOr<std::optional<LoadedCheckpoint>> LoadLatest();

  // Checks one file's framing and checksum; the payload on success.
  static absl::StatusOr<LoadedCheckpoint> Decode(absl::string_view bytes, const std::string& path);
  static std::string Encode(int64_t step, absl::string_view payload);
  static std::string FileName(int64_t step);

 private:
  // (step, name) of every ckpt-*.ddpt file, newest first.
  absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> ListCheckpoints();

  std::string dir_;
  int keep_;
  FileEnv* env_;
};

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IO_CHECKPOINT_STORE_H_
