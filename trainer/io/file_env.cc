#include "trainer/io/file_env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ddprun::trainer {
namespace {

absl::Status ErrnoStatus(const std::string& context, int err) {
  std::string msg = absl::StrCat(context, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(msg);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) close(fd_);
  }
  absl::Status Append(absl::string_view data) override {
    while (!data.empty()) {
      const ssize_t n = write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(absl::StrCat(path_, ": write"), errno);
      }
      data.remove_prefix(n);
    }
    return absl::OkStatus();
  }
  absl::Status Sync() override {
    if (fdatasync(fd_) != 0) return ErrnoStatus(absl::StrCat(path_, ": fsync"), errno);
    return absl::OkStatus();
  }
  absl::Status Close() override {
    const int fd = fd_;
    fd_ = -1;
    if (close(fd) != 0) return ErrnoStatus(absl::StrCat(path_, ": close"), errno);
    return absl::OkStatus();
  }

 private:
  std::string path_;
  int fd_;
};

class PosixFileEnv final : public FileEnv {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus(absl::StrCat(path, ": cannot create"), errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }
  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    if (rename(from.c_str(), to.c_str()) != 0) {
      return ErrnoStatus(absl::StrCat("rename ", from, " -> ", to), errno);
    }
    return absl::OkStatus();
  }
  absl::Status RemoveFile(const std::string& path) override {
    if (unlink(path.c_str()) != 0) return ErrnoStatus(absl::StrCat(path, ": unlink"), errno);
    return absl::OkStatus();
  }
  absl::Status SyncDir(const std::string& dir) override {
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(absl::StrCat(dir, ": open directory"), errno);
    const int rc = fsync(fd);
    const int err = errno;
    close(fd);
    if (rc != 0) return ErrnoStatus(absl::StrCat(dir, ": fsync directory"), err);
    return absl::OkStatus();
  }
  absl::Status CreateDirs(const std::string& dir) override {
    std::string partial;
    size_t pos = 0;
    while (pos != std::string::npos) {
      pos = dir.find('/', pos + 1);
      partial = dir.substr(0, pos);
      if (partial.empty()) continue;
      if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        return ErrnoStatus(absl::StrCat(partial, ": mkdir"), errno);
      }
    }
    struct stat st;
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(dir, ": not a directory"));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(absl::StrCat(path, ": open"), errno);
    std::string out;
    char buf[1 << 16];
    while (true) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        close(fd);
        return ErrnoStatus(absl::StrCat(path, ": read"), err);
      }
      if (n == 0) break;
      out.append(buf, n);
    }
    close(fd);
    return out;
  }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) return ErrnoStatus(absl::StrCat(dir, ": opendir"), errno);
    std::vector<std::string> names;
    while (struct dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(std::move(name));
    }
    closedir(d);
    return names;
  }
  bool FileExists(const std::string& path) override { return access(path.c_str(), F_OK) == 0; }
};

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

FileEnv* FileEnv::Default() {
  static PosixFileEnv* env = new PosixFileEnv();
  return env;
}

absl::Status WriteFileAtomically(FileEnv* env, const std::string& path, absl::string_view data) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  absl::Status status = [&]() -> absl::Status {
    DDPRUN_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, env->NewWritableFile(tmp));
    DDPRUN_RETURN_IF_ERROR(f->Append(data));
    DDPRUN_RETURN_IF_ERROR(f->Sync());
    DDPRUN_RETURN_IF_ERROR(f->Close());
    DDPRUN_RETURN_IF_ERROR(env->RenameFile(tmp, path));
    return env->SyncDir(DirName(path));
  }();
  if (!status.ok() && env->FileExists(tmp)) {
    env->RemoveFile(tmp).IgnoreError();  // the previous `path` stays untouched
  }
  return status;
}

}  // namespace ddprun::trainer
