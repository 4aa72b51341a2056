// Before a cold restart on a GPU node, ddprun waits (bounded) until the GPU memory of the
// workers it just stopped is released: a process the kernel has reaped can still hold its memory
// while the driver tears its context down, and a worker's children (DataLoader processes, in its
// process group) may still be dying; a new worker allocating at that moment fails with "CUDA out
// of memory" for memory nobody uses any more.
//
// The evidence is the driver's own list of compute processes, from
// `nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`, asked every
// kPoll until no process of the previous workers holds memory, or the timeout. A process is the
// previous workers' when its pid is one of theirs or its process group is (each worker leads its
// own). Where nvidia-smi is not installed there is nothing to wait for; where it fails, or lists
// pids of another pid namespace (a container), nothing of ours is seen and nothing is waited for.
#ifndef DDPRUN_LAUNCHER_HEALTH_GPU_RELEASE_H_
#define DDPRUN_LAUNCHER_HEALTH_GPU_RELEASE_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "common/environment.h"
#include "common/event_loop.h"
#include "launcher/health/health_check.h"

namespace ddprun::launcher {

struct GpuProcess {
  pid_t pid = 0;
  int64_t used_mib = 0;  // 0 where the driver says [N/A]
};

// nvidia-smi's "PID, USED_MIB" lines; lines that are not such pairs are skipped.
std::vector<GpuProcess> ParseComputeApps(absl::string_view csv);

// The processes of `listed` that belong to the workers whose pids are `worker_pids`: one of
// them, or a process whose group (`group_of`, /proc in production) is one of them.
std::vector<GpuProcess> HeldByWorkers(const std::vector<GpuProcess>& listed,
                                      const std::set<pid_t>& worker_pids,
                                      const std::function<pid_t(pid_t)>& group_of);

// "pid 4242 (7.5 GiB), pid 4243 (512 MiB)".
std::string DescribeHeld(const std::vector<GpuProcess>& held);

struct GpuReleaseOptions {
  std::string nvidia_smi;  // its path
  Duration timeout = std::chrono::seconds(30);
  Environment env;
};

struct GpuReleaseResult {
  bool released = true;          // nothing of the workers' is held (any more)
  Duration waited{};             // from Wait() to the result
  std::vector<GpuProcess> held;  // at the timeout: what was still held
  std::string query_failed;      // nvidia-smi could not answer: why (then released is true)
};

class GpuReleaseWait {
 public:
  static constexpr Duration kPoll = std::chrono::milliseconds(250);

  GpuReleaseWait(EventLoop* loop, GpuReleaseOptions options);
  ~GpuReleaseWait();

  // Asks the driver until none of `worker_pids`' processes holds GPU memory or the timeout;
  // `done` runs on the loop (never before Wait returns). One wait at a time.
  void Wait(std::set<pid_t> worker_pids, std::function<void(const GpuReleaseResult&)> done);
  // Routed from the agent's SIGCHLD handling: false when not the query's process.
  bool HandleChildExit(pid_t pid, int wait_status) {
    return query_.HandleChildExit(pid, wait_status);
  }
  bool waiting() const { return done_ != nullptr; }

 private:
  void Ask();
  void OnAnswer(const HealthVerdict& answer);
  void Finish(GpuReleaseResult result);

  EventLoop* const loop_;
  const GpuReleaseOptions options_;
  HealthCheck query_;  // one nvidia-smi run, its output kept whole (bounded)
  std::set<pid_t> worker_pids_;
  TimePoint started_{};
  EventLoop::TimerId poll_timer_ = 0;
  std::function<void(const GpuReleaseResult&)> done_;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_HEALTH_GPU_RELEASE_H_
