// In-process recovery's process groups (docs/design.md §6b.2, §6b.5): one per round of the
// agent's control channel, formed over the round's store and dropped when the round is over.
//
// - The store: the round's rank 0 serves a c10d TCPStore at master_addr:master_port unless one
//   is served there already (a surviving worker's store of an earlier round, possibly this
//   process's own): then, like every other rank, it connects as a client. A store this process
//   serves lives as long as the RoundGroup (the whole run): another process may be using it.
//   Keys go under the round's store_prefix.
// - Forming the group (the store connection, the gloo rendezvous) runs on a helper thread, so
//   that the worker can give up as soon as the round is over; an abandoned helper is detached
//   and owns references to everything it uses.
// - Waits for collectives go through a RoundWaiter: they return when the collective completes
//   or the round is over, whichever is first; a collective blocked on a peer that vanished
//   without a FIN is abandoned as soon as the agent's abort arrives.
// - A dropped group is destroyed on the GroupReaper's thread, not the train loop's
//   (group_reaper.h says why it must be destroyed, and why not here).
//
// Thread-compatible: one thread (the train loop) calls Form and Drop.
#ifndef DDPRUN_TRAINER_TRAIN_ROUND_GROUP_H_
#define DDPRUN_TRAINER_TRAIN_ROUND_GROUP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "control/control_client.h"
#include "trainer/io/dist_env.h"
#include "trainer/train/comm.h"
#include "trainer/train/group_reaper.h"

namespace ddprun::trainer {

struct ServedStores;  // round_group.cc

// The worker's environment for `round`: its coordinates replace the torchrun variables'.
DistEnv RoundEnv(const DistEnv& env, const control::RoundMessage& round);

// One condition variable that everything a waiter may wait for signals: the control channel
// (any message, or its end) and collectives' futures. Shared: callbacks may fire after the
// waiter is gone. Thread-safe.
struct Wakeup {
  absl::Mutex mu;  // what a waiter waits for is its own; it checks it with mu held
  absl::CondVar cv;
  void Notify() ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock lock(&mu);
    cv.SignalAll();
  }
};

class RoundGroup {
 public:
  // `control` must outlive this object and everything it forms; its wakeup is set here.
  // `options`: backend (gloo) and timeout of every group.
  RoundGroup(control::ControlClient* control, CommOptions options);
  ~RoundGroup();
  RoundGroup(const RoundGroup&) = delete;
  RoundGroup& operator=(const RoundGroup&) = delete;

  // The communicator of round `round` for `env` (RoundEnv), its waits bound to that round.
  // kAborted when the round is over before it has formed; store and group errors as
  // ConnectCommunicator's.
  absl::StatusOr<std::unique_ptr<Communicator>> Form(const DistEnv& env, int64_t round);

  // Takes a communicator whose round is over and destroys it in the background.
  void Drop(std::unique_ptr<Communicator> comm);
  // Dropped communicators destroyed so far (for tests).
  int destroyed() const { return reaper_.destroyed(); }

 private:
  control::ControlClient* const control_;
  const CommOptions options_;
  const std::shared_ptr<Wakeup> wakeup_;
  const std::shared_ptr<ServedStores> served_;
  GroupReaper reaper_;
};

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_ROUND_GROUP_H_
