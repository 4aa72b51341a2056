#include "trainer/io/step_report.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ddprun::trainer {

StepReporter::StepReporter(const std::string& path, std::ostream& warnings)
    : path_(path), warnings_(warnings) {
  if (path_.empty()) return;
  fd_ = open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    TurnOff(std::strerror(errno));
    return;
  }
  // A regular file would take the lines too, but several ranks would overwrite each other's.
  struct stat st;
  if (fstat(fd_, &st) != 0 || !S_ISFIFO(st.st_mode)) {
    TurnOff("not a FIFO");
    return;
  }
  signal(SIGPIPE, SIG_IGN);
  pid_ = getpid();
}

StepReporter::~StepReporter() {
  if (fd_ >= 0) close(fd_);
}

void StepReporter::Report(int64_t step, std::optional<double> compute_ms,
                          std::optional<double> checkpoint_ms) {
  if (fd_ < 0) return;
  char line[160];
  int n = std::snprintf(line, sizeof(line), "{\"pid\":%d,\"step\":%lld", static_cast<int>(pid_),
                        static_cast<long long>(step));
  if (compute_ms.has_value()) {
    n += std::snprintf(line + n, sizeof(line) - n, ",\"compute_ms\":%.3f", *compute_ms);
  }
  if (checkpoint_ms.has_value()) {
    n += std::snprintf(line + n, sizeof(line) - n, ",\"checkpoint_ms\":%.3f", *checkpoint_ms);
  }
  n += std::snprintf(line + n, sizeof(line) - n, "}\n");
  const ssize_t written = write(fd_, line, static_cast<size_t>(n));
  if (written == n) return;
  // The launcher reads behind: this step's report is lost, the next one says more anyway.
  if (written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  TurnOff(written < 0 ? std::strerror(errno) : "short write");
}

void StepReporter::TurnOff(const std::string& reason) {
  warnings_ << "ddp-train: step reports off: " << path_ << ": " << reason << std::endl;
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

}  // namespace ddprun::trainer
