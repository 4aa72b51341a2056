// The file operations checkpoints need, behind an interface so tests can inject faults
// (LevelDB's Env idea): a full disk, a torn write, a failing rename.
#ifndef DDPRUN_TRAINER_IO_FILE_ENV_H_
#define DDPRUN_TRAINER_IO_FILE_ENV_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddprun::trainer {

// A file being written. Not thread-safe.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual absl::Status Append(absl::string_view data) = 0;
  virtual absl::Status Sync() = 0;  // data durable (fsync)
  virtual absl::Status Close() = 0;
};

// Thread-safe; implementations hold no per-call state.
class FileEnv {
 public:
  virtual ~FileEnv() = default;
  // Creates or truncates `path`.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  virtual absl::Status RenameFile(const std::string& from, const std::string& to) = 0;
  virtual absl::Status RemoveFile(const std::string& path) = 0;
  // fsync of the directory itself, so a rename inside it is durable.
  virtual absl::Status SyncDir(const std::string& dir) = 0;
  // mkdir -p.
  virtual absl::Status CreateDirs(const std::string& dir) = 0;
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  // Names (not paths) of the entries of `dir`, without "." and "..".
  virtual absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) = 0;
  virtual bool FileExists(const std::string& path) = 0;

  // The POSIX implementation; stateless, so sharing it is not global mutable state.
  static FileEnv* Default();
};

// Forwards every call to `base`; subclasses override what they want to break.
class FileEnvWrapper : public FileEnv {
 public:
  explicit FileEnvWrapper(FileEnv* base) : base_(base) {}
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return base_->NewWritableFile(path);
  }
  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    return base_->RenameFile(from, to);
  }
  absl::Status RemoveFile(const std::string& path) override { return base_->RemoveFile(path); }
  absl::Status SyncDir(const std::string& dir) override { return base_->SyncDir(dir); }
  absl::Status CreateDirs(const std::string& dir) override { return base_->CreateDirs(dir); }
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    return base_->ReadFile(path);
  }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override {
    return base_->ListDir(dir);
  }
  bool FileExists(const std::string& path) override { return base_->FileExists(path); }

 protected:
  FileEnv* base_;
};

// Writes `data` to `path` atomically: temp file, fsync, rename, fsync of the directory.
absl::Status WriteFileAtomically(FileEnv* env, const std::string& path, absl::string_view data);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IO_FILE_ENV_H_
