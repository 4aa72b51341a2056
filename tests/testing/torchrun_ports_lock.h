// torchrun takes fixed ports (--standalone: 29400, static: 29500): two tests running it at once
// (ctest -j) would collide. Each torchrun run holds this lock, shared by every test process
// through a file; a launcher that is not a torchrun takes no lock.
#ifndef DDPRUN_TESTS_TESTING_TORCHRUN_PORTS_LOCK_H_
#define DDPRUN_TESTS_TESTING_TORCHRUN_PORTS_LOCK_H_

#include <string>

namespace ddprun::testing {

class TorchrunPortsLock {
 public:
  explicit TorchrunPortsLock(const std::string& program);
  ~TorchrunPortsLock();
  TorchrunPortsLock(const TorchrunPortsLock&) = delete;
  TorchrunPortsLock& operator=(const TorchrunPortsLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_TORCHRUN_PORTS_LOCK_H_
