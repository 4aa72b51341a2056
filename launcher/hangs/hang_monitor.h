// The agent's hang detection, wired to real things: the FileTimer pipe
// (TORCHELASTIC_TIMER_FILE, torch's protocol, timer_table.h), the ddprun progress pipe
// (DDPRUN_PROGRESS_FILE, step reports), worker output, and /proc process states, judged by
// HangDetector and TimerTable on a 100 ms tick while a group runs, and FileTimer deadlines at
// the exact time. It never stops anything
// itself: a verdict goes to the agent, which treats it as a failure of the job.
//
// Only pids of this node's workers (or of processes in their process groups) are believed: a
// FileTimer request for any other pid is ignored, so a worker cannot make ddprun signal an
// arbitrary process. Step reports come on one progress pipe per local rank (its
// DDPRUN_PROGRESS_FILE, a random name in a folder nobody may list) and count for that rank only,
// when their pid is its worker or a descendant: a worker cannot report steps for another rank
// (and so hide its hang) by naming that rank's pid. Malformed, oversized, foreign or flooding
// input is ignored with one warning per worker and kind (one per pipe when it cannot be
// attributed), whatever the number of pids it names.
#ifndef DDPRUN_LAUNCHER_HANGS_HANG_MONITOR_H_
#define DDPRUN_LAUNCHER_HANGS_HANG_MONITOR_H_

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/environment.h"
#include "common/event_loop.h"
#include "launcher/config/options.h"
#include "launcher/hangs/fifo_channel.h"
#include "launcher/hangs/hang_detector.h"
#include "launcher/hangs/timer_table.h"
#include "launcher/workers/worker_group.h"

namespace ddprun::launcher {

class HangMonitor {
 public:
  using HangHandler = std::function<void(const HangVerdict& verdict)>;
  // Called about once a second while a group runs, with its ranks' last signs of life.
  using ProgressHandler = std::function<void(const std::vector<LocalProgress>& progress)>;
  // Every step report of a worker of the current group (also without hang detection: the
  // goodput ledger counts steps).
  // A worker's step report: its step, its previous step's compute time and the checkpoint it
  // saved when it sent them.
  using StepHandler = std::function<void(int local_rank, const StepReport& report)>;

  HangMonitor(EventLoop* loop, const LaunchOptions& options, HangHandler on_hang,
              ProgressHandler on_progress, StepHandler on_step = nullptr);
  ~HangMonitor();  // ClosePipes()

  // Stops watching and removes the pipes ddprun made (and their folder). Idempotent.
  void ClosePipes();

  // Creates the pipes (private ones inside `private_dir`): the progress pipes always, the
  // FileTimer pipe with hang detection. InvalidArgument names the variable and path when
  // TORCHELASTIC_TIMER_FILE cannot be used.
  absl::Status Start(const std::string& private_dir);

  // What the worker of `local_rank` gets: TORCHELASTIC_TIMER_FILE, its DDPRUN_PROGRESS_FILE,
  // and, for Python workers, PYTHONFAULTHANDLER=1 unless the user set it (SIGABRT then prints
  // every thread).
  void AddWorkerEnv(int local_rank, bool python, Environment* env) const;

  // A group started (`group` outlives the next OnGroupStopping) / is being stopped.
  void OnGroupStarted(const WorkerGroup* group);
  void OnGroupStopping();
  void OnOutput(int local_rank);
  void OnExited(int local_rank, int pid);

  std::vector<LocalProgress> Progress() const;
  bool enabled() const { return options_.hang_detection(); }

 private:
  void OnTimerLine(absl::string_view line, bool oversized);
  void OnProgressLine(int local_rank, absl::string_view line, bool oversized);
  // Attributes `pid` to a local rank; warns once (per `channel`) when it is not a worker's.
  int RankOf(int pid, const char* channel);
  void WarnOnce(const std::string& key, const std::string& message);
  void Tick();
  void Judge();  // drains the pipes, then looks for a hang
  void ArmExpiryTimer();

  EventLoop* loop_;
  const LaunchOptions& options_;
  HangHandler on_hang_;
  ProgressHandler on_progress_;
  StepHandler on_step_;
  std::unique_ptr<FifoChannel> timer_pipe_;
  std::vector<std::unique_ptr<FifoChannel>> progress_pipes_;  // by local rank
  std::string progress_dir_;  // holds them; mode 0100 while they exist
  TimerTable timers_;
  HangDetector detector_;
  const WorkerGroup* group_ = nullptr;  // while armed
  EventLoop::TimerId tick_ = 0;
  EventLoop::TimerId expiry_timer_ = 0;  // at the earliest FileTimer deadline
  std::optional<double> armed_expiry_;
  int ticks_ = 0;
  std::set<std::string> warned_;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_HANGS_HANG_MONITOR_H_
