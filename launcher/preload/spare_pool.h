// --preload=MODULES: warm starts for Python workers (--preload=native: for a program that
// implements the hand-over itself, SpareHook::kNativeProgram). For each local rank one spare
// interpreter runs the worker's own command line (python3 -u script args) but stops in site's
// sitecustomize (launcher/preload/preload_hook.py) before the script: it imports MODULES on a
// thread of its own and waits. That thread runs at SCHED_IDLE once workers have started (the spares
// made at ddprun's start import at full speed while the node waits for its peers). A start hands
// the spare what belongs to that start (the whole environment, stdout and stderr) over a socket;
// the spare then returns to Python's start-up, which runs the script as for a cold start. A new
// spare is prepared at once for the next start.
//
// Safety:
//  - the spare's environment is the node-level one (BuildSpareEnv): what differs between
//    starts arrives only at the hand-over;
//  - before the first spare, a probe checks that the interpreter runs sitecustomize at all (a
//    wrapper with -E/-I/-S would run the script directly with the spare's environment); if
//    not, or a module fails to import, or CUDA was touched before the hand-over: one warning
//    and cold starts for the rest of the run;
//  - a spare's socket is read for one message ("ready", or why it failed) and not again: a
//    spare that repeats itself costs the agent nothing (issue 43 D3);
//  - a spare is its own process group, dies with the agent (PR_SET_PDEATHSIG, the orphan
//    guard, and end of file on its socket), and a spare that dies is replaced (three deaths
//    in a row before becoming ready turn preloading off).
// Single-threaded: every method runs on the agent's EventLoop thread (which must be the
// thread whose death should kill the spares).
#ifndef DDPRUN_LAUNCHER_PRELOAD_SPARE_POOL_H_
#define DDPRUN_LAUNCHER_PRELOAD_SPARE_POOL_H_

#include <sys/types.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/event_loop.h"
#include "launcher/preload/hand_over_receipt.h"
#include "launcher/process/orphan_guard.h"
#include "launcher/process/spawn.h"

namespace ddprun::launcher {

// How a spare stops before the worker's own code and takes the hand-over.
enum class SpareHook {
  // ddprun's sitecustomize (preload_hook.py) in a Python worker's interpreter, which imports
  // `modules`; a probe first checks that the interpreter runs sitecustomize at all.
  kPythonSitecustomize,
  // The program itself (--preload=native): it warms up as it sees fit, sends "ready" and waits
  // for the hand-over (docs/design.md §6a, trainer/io/preload_handover.h). No probe: a program
  // that does not speak the protocol cannot be told from one that does without running it, so
  // the user's --preload=native is the promise.
  kNativeProgram,
};

class SparePool {
 public:
  // `guard` (not owned, may be null) is told of every spare's process group. `modules`: what
  // kPythonSitecustomize spares import (unused by kNativeProgram).
  SparePool(EventLoop* loop, OrphanGuard* guard, SpareHook hook, std::vector<std::string> modules);
  ~SparePool();  // SIGKILLs every spare and removes the hook's folder
  SparePool(const SparePool&) = delete;
  SparePool& operator=(const SparePool&) = delete;

  // templates[lr]: the command, node-level environment (BuildSpareEnv) and CPUs of local rank
  // lr's worker; their stdout/stderr fields are ignored. Writes the hook and starts the probe;
  // the spares follow once it has passed. An error here is the agent's (a temporary folder).
  absl::Status Start(std::vector<SpawnRequest> templates);

  // Starts the worker of `local_rank`: hands `request` (its environment, stdout_fd, stderr_fd)
  // to that rank's spare when one is running the same command, else Spawn(request). `receipt`
  // (optional) gets what tells, once the worker has exited, whether it read that hand-over
  // (a cold start leaves it empty).
  absl::StatusOr<pid_t> Launch(int local_rank, const SpawnRequest& request,
                               HandOverReceipt* receipt = nullptr);

  // The workers of the latest start have shown a first sign of life (output): their start-up
  // is over, and the spares waiting for that start now.
  void WorkersSettled();

  // A child of the agent exited; false when it is neither a spare nor the probe.
  bool HandleChildExit(pid_t pid, int wait_status);

  bool active() const { return active_; }
  // The spare waiting for `local_rank` (-1: none), and whether it has finished importing.
  pid_t SparePid(int local_rank) const;
  bool SpareReady(int local_rank) const;
  int handed_over() const { return handed_over_; }
  // Every process of the pool: the spares and the probe.
  std::set<pid_t> OwnPids() const;

 private:
  struct Spare {
    pid_t pid = -1;
    int socket = -1;  // ours; the spare's end is its DDPRUN_PRELOAD_FD
    // A copy of the spare's end (HandOverReceipt): kept open, it outlives the spare, so that a
    // hand-over the spare never read can be seen once it is gone.
    int spare_end = -1;
    bool ready = false;
    std::chrono::steady_clock::time_point started;
  };
  // The spares may be made now (the probe passed, or a native program needs none).
  void ActivateAndStartSpares();
  void StartSpare(int local_rank);
  void StartSpareLater(int local_rank, std::chrono::milliseconds delay);
  void OnSpareMessage(int local_rank);
  // Closes our end of the spare's socket and empties its slot; its process is gone already.
  void Forget(Spare* spare);
  // Forgets the spare and SIGKILLs (and reaps) its process group.
  void KillAndForget(Spare* spare);
  // Logs `why`, drops local rank `lr`'s spare (a new one follows) and starts `request` cold.
  absl::StatusOr<pid_t> ColdInsteadOfSpare(int lr, const SpawnRequest& request,
                                           const std::string& why);
  // Turns preloading off for the rest of the run: one warning, every spare killed.
  void TurnOff(const std::string& why);

  // What the spare warms up, for log lines: the modules, or "the program".
  std::string WarmUpWhat() const;

  EventLoop* loop_;
  OrphanGuard* guard_;
  const SpareHook hook_;
  const std::vector<std::string> modules_;
  std::vector<SpawnRequest> templates_;
  std::vector<Spare> spares_;
  std::vector<EventLoop::TimerId> settle_timers_;  // by local rank; 0: none pending
  std::string hook_dir_;  // holds sitecustomize.py; removed by the destructor
  pid_t probe_ = -1;
  bool active_ = false;   // the probe passed and nothing has turned preloading off
  int early_deaths_ = 0;  // spares in a row that died before they were ready
  int handed_over_ = 0;
  bool workers_started_ = false;  // Launch has been called: spares import at SCHED_IDLE
  bool workers_settled_ = false;  // WorkersSettled() since the latest Launch
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_PRELOAD_SPARE_POOL_H_
