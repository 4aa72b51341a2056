// DeathExplainer: ExplainDeath (death_cause.h) with the kernel log the agent keeps open from its
// start. The records the kernel writes are taken as they come (Drain, on the agent's loop) into
// a bounded window of recent ones, so that a flood of unrelated kernel messages cannot push a
// worker's OOM or fault line out of the kernel's ring before the worker's death is explained;
// every signal death is then matched against that window.
//
// It also watches the workers' memory cgroups (Watch, every second): the cgroup each live worker
// is in and that cgroup's OOM kill count when first seen there, so that a SIGKILL while the
// count rose is an OOM kill even without a kernel record (memory_cgroup.h).
//
// When the log cannot be opened (not root where kernel.dmesg_restrict=1, no /dev/kmsg in a
// container) and no cgroup counted an OOM kill, every signal death is "cause unknown: signal 9,
// kernel log /dev/kmsg not readable: ..." — never a guess.
#ifndef DDPRUN_LAUNCHER_CAUSES_DEATH_EXPLAINER_H_
#define DDPRUN_LAUNCHER_CAUSES_DEATH_EXPLAINER_H_

#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launcher/causes/death_cause.h"
#include "launcher/causes/kernel_log.h"
#include "launcher/causes/memory_cgroup.h"

namespace ddprun::launcher {

class DeathExplainer {
 public:
  // Records kept; the oldest go first. A worker's own lines come within seconds of its death,
  // so this is many floods' worth.
  static constexpr size_t kMaxRecent = 8192;

  // Opens `kmsg_path` at its end.
  explicit DeathExplainer(const std::string& kmsg_path, CgroupFiles cgroups = {});
  // `log` may be null: `unreadable_because` then says why (tests).
  DeathExplainer(std::unique_ptr<KernelLog> log, std::string unreadable_because,
                 CgroupFiles cgroups = {});

  // Takes what the kernel wrote since the last call. Cheap; non-blocking.
  void Drain();
  // Notes the memory cgroup of each of `live_pids` (and its OOM kill count, when it is new to
  // the pid) and forgets pids no longer live. Cheap: one /proc read per worker.
  void Watch(const std::vector<pid_t>& live_pids);
  // Drains, then explains `death` from the window and its memory cgroup's count (when watched;
  // `death.cgroup` is filled in here).
  DeathCause Explain(const WorkerDeath& death);

  bool readable() const { return log_ != nullptr; }
  // Empty while readable: "kernel log /dev/kmsg not readable: Permission denied ...".
  const std::string& unreadable_because() const { return unreadable_because_; }

 private:
  std::unique_ptr<KernelLog> log_;
  std::string unreadable_because_;
  std::deque<KmsgRecord> recent_;
  bool lost_ = false;  // the kernel's ring overwrote records before they were read
  struct Watched {
    MemoryCgroupRef cgroup;
    int64_t kills_first_seen = 0;
  };
  MemoryCgroupReader cgroups_;
  std::map<pid_t, Watched> watched_;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CAUSES_DEATH_EXPLAINER_H_
