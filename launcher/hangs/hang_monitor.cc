#include "launcher/hangs/hang_monitor.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/env_variables.h"
#include "common/log.h"
#include "common/strings.h"

namespace ddprun::launcher {
namespace {

constexpr std::chrono::milliseconds kTick{100};
constexpr int kTicksPerProgressReport = 10;

double WallSeconds() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

HangMonitor::HangMonitor(EventLoop* loop, const LaunchOptions& options, HangHandler on_hang,
                         ProgressHandler on_progress, StepHandler on_step)
    : loop_(loop),
      options_(options),
      on_hang_(std::move(on_hang)),
      on_progress_(std::move(on_progress)),
      on_step_(std::move(on_step)),
      detector_(
          {options.hang_timeout, options.uninterruptible_timeout, options.hang_startup_timeout},
          options.nproc_per_node) {}

HangMonitor::~HangMonitor() { ClosePipes(); }

void HangMonitor::ClosePipes() {
  OnGroupStopping();
  timer_pipe_.reset();
  if (progress_dir_.empty()) return;
  // Writable again, so that the pipes can be removed, then the folder.
  chmod(progress_dir_.c_str(), 0700);
  progress_pipes_.clear();
  rmdir(progress_dir_.c_str());
  progress_dir_.clear();
}

absl::Status HangMonitor::Start(const std::string& private_dir) {
  if (enabled() && options_.file_timer) {
    const std::string path =
        options_.timer_file.empty() ? absl::StrCat(private_dir, "/timer") : options_.timer_file;
    auto pipe = FifoChannel::Open(loop_, path,
                                  [this](absl::string_view l, bool big) { OnTimerLine(l, big); });
    if (!pipe.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("TORCHELASTIC_TIMER_FILE=", pipe.status().message()));
    }
    timer_pipe_ = *std::move(pipe);
  }
  // One pipe per local rank: a report counts for the rank whose pipe it came on. The names are
  // random and the folder may be searched but not listed (mode 0100), so a worker finds no
  // other rank's pipe from its own.
  progress_dir_ = absl::StrCat(private_dir, "/steps");
  if (mkdir(progress_dir_.c_str(), 0700) != 0) {
    const int err = errno;
    progress_dir_.clear();
    return absl::InternalError(absl::StrCat(private_dir, "/steps: ", strerror(err)));
  }
  for (int lr = 0; lr < options_.nproc_per_node; ++lr) {
    auto pipe = FifoChannel::Open(
        loop_, absl::StrCat(progress_dir_, "/", RandomHex(8)),
        [this, lr](absl::string_view l, bool big) { OnProgressLine(lr, l, big); });
    if (!pipe.ok()) return pipe.status();
    progress_pipes_.push_back(*std::move(pipe));
  }
  chmod(progress_dir_.c_str(), 0100);
  return absl::OkStatus();
}

void HangMonitor::AddWorkerEnv(int lr, bool python, Environment* env) const {
  if (timer_pipe_) (*env)["TORCHELASTIC_TIMER_FILE"] = timer_pipe_->path();
  if (lr >= 0 && lr < static_cast<int>(progress_pipes_.size())) {
    (*env)[kProgressFileVariable.name] = progress_pipes_[lr]->path();
  }
  if (python && enabled() && env->count("PYTHONFAULTHANDLER") == 0) {
    (*env)["PYTHONFAULTHANDLER"] = "1";
  }
}

void HangMonitor::OnGroupStarted(const WorkerGroup* group) {
  group_ = group;  // step reports are attributed to its workers, with or without detection
  if (!enabled()) return;
  detector_.Reset(std::chrono::steady_clock::now());
  for (int pid : timers_.Pids()) timers_.DropPid(pid);
  ticks_ = 0;
  if (tick_ == 0) tick_ = loop_->AddTimerAfter(kTick, [this] { Tick(); });
}

void HangMonitor::OnGroupStopping() {
  group_ = nullptr;
  for (EventLoop::TimerId* t : {&tick_, &expiry_timer_}) {
    if (*t != 0) loop_->CancelTimer(*t);
    *t = 0;
  }
  armed_expiry_.reset();
}

void HangMonitor::OnOutput(int local_rank) {
  if (group_ != nullptr) detector_.OnOutput(local_rank, std::chrono::steady_clock::now());
}

void HangMonitor::OnExited(int local_rank, int pid) {
  detector_.OnExited(local_rank);
  timers_.DropPid(pid);
}

std::vector<LocalProgress> HangMonitor::Progress() const {
  return detector_.Progress(std::chrono::steady_clock::now());
}

void HangMonitor::WarnOnce(const std::string& key, const std::string& message) {
  if (warned_.insert(key).second) LogWarning(message);
}

int HangMonitor::RankOf(int pid, const char* channel) {
  const int lr = group_ != nullptr ? group_->LocalRankOfPid(pid) : -1;
  if (lr < 0 && group_ != nullptr) {
    // Once per channel, not per pid: a worker naming a million made-up pids costs one line.
    WarnOnce(absl::StrCat(channel, "/foreign"),
             absl::StrCat("ignoring ", channel, " messages of pid ", pid,
                          ": not a worker of this node (nor in a worker's process group); "
                          "further ones, of any pid, silently"));
  }
  return lr;
}

void HangMonitor::OnTimerLine(absl::string_view line, bool oversized) {
  if (group_ == nullptr) return;
  const char* kChannel = "TORCHELASTIC_TIMER_FILE";
  if (oversized) {
    WarnOnce("timer/oversized",
             absl::StrCat("ignoring lines over ", FifoChannel::kMaxLine, " bytes on ", kChannel,
                          " (", timer_pipe_->path(), "); further ones silently"));
    return;
  }
  auto request = ParseTimerRequest(line);
  if (!request.ok()) {
    WarnOnce("timer/garbage", absl::StrCat("ignoring malformed lines on ", kChannel, " (",
                                           request.status().message(), ": '", line.substr(0, 80),
                                           "'); further ones silently"));
    return;
  }
  const int lr = RankOf(request->pid, kChannel);
  if (lr < 0) return;
  detector_.OnTimerMessage(lr, std::chrono::steady_clock::now());
  if (!timers_.Apply(*request)) {
    WarnOnce(absl::StrCat("timer/flood/", lr),
             absl::StrCat("local rank ", lr, " holds over ", TimerTable::kMaxScopesPerPid,
                          " FileTimer scopes at once; ignoring further acquires"));
  }
  ArmExpiryTimer();
}

void HangMonitor::ArmExpiryTimer() {
  // A scope's deadline is known exactly: judge it then, not at the next tick.
  const std::optional<double> next = timers_.NextExpiry();
  if (next.has_value() && next == armed_expiry_) return;
  if (expiry_timer_ != 0) loop_->CancelTimer(expiry_timer_);
  expiry_timer_ = 0;
  armed_expiry_ = next;
  if (!next.has_value()) return;
  const auto delay = std::chrono::duration<double>(std::max(0.0, *next - WallSeconds()));
  expiry_timer_ = loop_->AddTimerAfter(std::chrono::duration_cast<Duration>(delay), [this] {
    expiry_timer_ = 0;
    armed_expiry_.reset();
    Judge();
  });
}

void HangMonitor::OnProgressLine(int lr, absl::string_view line, bool oversized) {
  if (group_ == nullptr) return;
  auto report = oversized ? absl::InvalidArgumentError("oversized") : ParseStepReport(line);
  if (!report.ok()) {
    WarnOnce(
        absl::StrCat("progress/garbage/", lr),
        absl::StrCat("ignoring malformed lines on local rank ", lr, "'s DDPRUN_PROGRESS_FILE (",
                     report.status().message(), "); further ones silently"));
    return;
  }
  // The pipe says which rank; the pid must agree, or a worker could speak for another.
  if (group_->LocalRankOfDescendant(static_cast<pid_t>(report->pid)) != lr) {
    WarnOnce(absl::StrCat("progress/foreign/", lr),
             absl::StrCat("ignoring step reports on local rank ", lr,
                          "'s DDPRUN_PROGRESS_FILE that name pid ", report->pid,
                          ", which is not that worker nor a descendant of it; further ones "
                          "silently"));
    return;
  }
  if (enabled()) detector_.OnStep(lr, report->step, std::chrono::steady_clock::now());
  if (on_step_) on_step_(lr, *report);
}

void HangMonitor::Tick() {
  tick_ = loop_->AddTimerAfter(kTick, [this] { Tick(); });
  Judge();
}

void HangMonitor::Judge() {
  if (group_ == nullptr) return;
  const TimePoint now = std::chrono::steady_clock::now();
  // Judge what the workers said before judging their silence.
  if (timer_pipe_) timer_pipe_->Drain();
  for (auto& pipe : progress_pipes_) pipe->Drain();
  // Always: a stopped worker (state T) is the one to blame among several silent ones.
  for (const auto& [lr, state] : group_->ProcessStates()) detector_.OnProcessState(lr, state, now);
  for (int pid : timers_.Pids()) {
    if (kill(pid, 0) != 0 && errno == ESRCH) timers_.DropPid(pid);  // gone: never released
  }
  std::optional<HangVerdict> verdict;
  for (const TimerTable::Expired& e : timers_.TakeExpired(WallSeconds())) {
    const int lr = group_->LocalRankOfPid(e.pid);
    if (lr < 0) continue;
    HangVerdict v;
    v.kind = HangVerdict::Kind::kTimerExpired;
    v.local_rank = lr;
    v.scope = e.scope_id;
    v.signal = e.signal;
    verdict = v;
    break;
  }
  if (!verdict) verdict = detector_.Check(now);
  if (verdict) {
    OnGroupStopping();  // one verdict per group
    on_hang_(*verdict);
    return;
  }
  if (++ticks_ % kTicksPerProgressReport == 0) on_progress_(detector_.Progress(now));
  ArmExpiryTimer();
}

}  // namespace ddprun::launcher
