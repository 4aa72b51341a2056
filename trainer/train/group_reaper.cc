#include "trainer/train/group_reaper.h"

#include <utility>

namespace ddprun::trainer {

GroupReaper::GroupReaper(std::chrono::milliseconds exit_grace)
    : exit_grace_(exit_grace), shared_(std::make_shared<Shared>()), thread_(Run, shared_) {}

GroupReaper::~GroupReaper() {
  StdMutexLock lock(&shared_->mu);
  shared_->stop = true;
  shared_->cv.notify_all();
  const bool drained =
      lock.WaitFor(&shared_->cv, exit_grace_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared_->mu) {
        return shared_->queue.empty() && !shared_->busy;
      });
  if (!drained) {
    // Leaked on purpose, queued ones included: destroying them here would block the exit.
    for (std::unique_ptr<Communicator>& c : shared_->queue) c.release();
    shared_->queue.clear();
    lock.Unlock();
    thread_.detach();
    return;
  }
  lock.Unlock();
  thread_.join();
}

void GroupReaper::Destroy(std::unique_ptr<Communicator> comm) {
  if (comm == nullptr) return;
  StdMutexLock lock(&shared_->mu);
  shared_->queue.push_back(std::move(comm));
  shared_->cv.notify_all();
}

int GroupReaper::destroyed() const {
  StdMutexLock lock(&shared_->mu);
  return shared_->destroyed;
}

void GroupReaper::Run(std::shared_ptr<Shared> shared) {
  StdMutexLock lock(&shared->mu);
  while (true) {
    lock.Wait(&shared->cv, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared->mu) {
      return shared->stop || !shared->queue.empty();
    });
    if (shared->queue.empty()) return;  // stopping, nothing left
    std::unique_ptr<Communicator> next = std::move(shared->queue.front());
    shared->queue.pop_front();
    shared->busy = true;
    lock.Unlock();
    next.reset();  // may block until the group's communication timeout
    lock.Lock();
    shared->busy = false;
    ++shared->destroyed;
    shared->cv.notify_all();
  }
}

}  // namespace ddprun::trainer
