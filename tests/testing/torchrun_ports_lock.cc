#include "tests/testing/torchrun_ports_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace ddprun::testing {

TorchrunPortsLock::TorchrunPortsLock(const std::string& program) {
  if (program.find("torchrun") == std::string::npos) return;
  fd_ = open("/tmp/ddprun-tests-torchrun-ports.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ >= 0) flock(fd_, LOCK_EX);
}

TorchrunPortsLock::~TorchrunPortsLock() {
  if (fd_ >= 0) close(fd_);  // releases the lock
}

}  // namespace ddprun::testing
