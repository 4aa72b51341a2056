// Destroys the process groups of rounds that are over (in-process recovery, docs/design.md
// §6b.5), one at a time on a thread of its own, never on the train loop.
//
// Why not on the train loop: ProcessGroupGloo's destructor waits for its queue to drain and
// joins its worker threads, which may be stuck in a collective with a vanished peer until the
// communication timeout. Why not never (keeping them, as before): a group whose peer died keeps
// its gloo transport loop thread spinning on the dead peer's socket (LibTorch 1.13's gloo),
// measured at 30-40 % of a core per dropped group, and every later step runs slower for it.
//
// Thread-safe: Destroy and destroyed may be called from any thread.
#ifndef DDPRUN_TRAINER_TRAIN_GROUP_REAPER_H_
#define DDPRUN_TRAINER_TRAIN_GROUP_REAPER_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "common/std_mutex.h"
#include "trainer/train/comm.h"

namespace ddprun::trainer {

class GroupReaper {
 public:
  // `exit_grace`: how long the destructor waits for destructions still under way.
  explicit GroupReaper(std::chrono::milliseconds exit_grace = std::chrono::seconds(5));
  // Waits up to `exit_grace` for the queue to empty; what is left then (a destructor stuck
  // until its communication timeout) is leaked with its thread, as the process is ending.
  ~GroupReaper();
  GroupReaper(const GroupReaper&) = delete;
  GroupReaper& operator=(const GroupReaper&) = delete;

  // Queues `comm` (whose round is over, and which nothing uses any more) for destruction.
  void Destroy(std::unique_ptr<Communicator> comm);
  // Communicators destroyed so far.
  int destroyed() const;

 private:
  // Shared with the reaper's thread, which may outlive this object. A StdMutex: the destructor
  // waits on the steady clock (common/std_mutex.h).
  struct Shared {
    StdMutex mu;
    std::condition_variable cv;
    std::deque<std::unique_ptr<Communicator>> queue ABSL_GUARDED_BY(mu);
    bool busy ABSL_GUARDED_BY(mu) = false;  // a destructor is running
    bool stop ABSL_GUARDED_BY(mu) = false;
    int destroyed ABSL_GUARDED_BY(mu) = 0;
  };
  static void Run(std::shared_ptr<Shared> shared);

  const std::chrono::milliseconds exit_grace_;
  const std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_GROUP_REAPER_H_
