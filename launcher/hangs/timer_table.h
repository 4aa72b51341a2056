// torch.distributed.elastic's FileTimer protocol, served by the agent: the requests a
// FileTimerClient writes into TORCHELASTIC_TIMER_FILE (one JSON line each) and the table of
// countdown timers they build. Pure: no pipe, no clock read, no signal; the agent feeds lines
// and the time in, and acts on what expires.
//
// Protocol (torch/distributed/elastic/timer/file_based_local_timer.py):
//   {"version": 1, "pid": 123, "scope_id": "train.py#57", "expiration_time": 1700000000.5,
//    "signal": 9}
// expiration_time is wall-clock seconds (time.time()); a negative one releases the scope.
// A pid whose scope expires is reaped with the signal of its earliest expired scope that asks
// for one (signal > 0); scopes asking for none are dropped without action, as torch does.
#ifndef DDPRUN_LAUNCHER_HANGS_TIMER_TABLE_H_
#define DDPRUN_LAUNCHER_HANGS_TIMER_TABLE_H_

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddprun::launcher {

struct TimerRequest {
  int pid = 0;
  std::string scope_id;
  double expiration_time = 0;  // wall-clock seconds; < 0 releases
  int signal = 0;
  bool is_release() const { return expiration_time < 0; }
};

// Parses one line of the pipe (without its newline). Errors say what is wrong, for a warning.
absl::StatusOr<TimerRequest> ParseTimerRequest(absl::string_view line);

class TimerTable {
 public:
  // A worker holding this many scopes at once is flooding; further acquires are refused.
  static constexpr size_t kMaxScopesPerPid = 1024;

  struct Expired {
    int pid = 0;
    std::string scope_id;  // the scope whose signal is used (the earliest one asking for one)
    int signal = 0;        // > 0
    double expiration_time = 0;
  };

  // Acquires or releases. Returns false when an acquire is refused (kMaxScopesPerPid).
  bool Apply(const TimerRequest& request);
  // Every pid with a scope expired at `now`, earliest expiry first. All timers of those pids
  // are removed (torch clears a reaped pid's timers); pids whose expired scopes ask for no
  // signal are dropped silently.
  std::vector<Expired> TakeExpired(double now);
  // The process is gone: its timers can never be released.
  void DropPid(int pid);

  std::vector<int> Pids() const;
  // The earliest expiration_time held, if any.
  std::optional<double> NextExpiry() const;
  size_t size() const { return timers_.size(); }

 private:
  std::map<std::pair<int, std::string>, TimerRequest> timers_;
  std::map<int, size_t> scopes_per_pid_;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_HANGS_TIMER_TABLE_H_
