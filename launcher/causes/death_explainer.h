// DeathExplainer: ExplainDeath (death_cause.h) with the kernel log the agent keeps open from its
// start. The records the kernel writes are taken as they come (Drain, on the agent's loop) into
// a bounded window of recent ones, so that a flood of unrelated kernel messages cannot push a
// worker's OOM or fault line out of the kernel's ring before the worker's death is explained;
// every signal death is then matched against that window.
//
// When the log cannot be opened (not root where kernel.dmesg_restrict=1, no /dev/kmsg in a
// container), every signal death is "cause unknown: signal 9, kernel log /dev/kmsg not
// readable: ..." — never a guess.
#ifndef DDPRUN_LAUNCHER_CAUSES_DEATH_EXPLAINER_H_
#define DDPRUN_LAUNCHER_CAUSES_DEATH_EXPLAINER_H_

#include <cstddef>
#include <deque>
#include <memory>
#include <string>

#include "launcher/causes/death_cause.h"
#include "launcher/causes/kernel_log.h"

namespace ddprun::launcher {

class DeathExplainer {
 public:
  // Records kept; the oldest go first. A worker's own lines come within seconds of its death,
  // so this is many floods' worth.
  static constexpr size_t kMaxRecent = 8192;

  // Opens `kmsg_path` at its end.
  explicit DeathExplainer(const std::string& kmsg_path);
  // `log` may be null: `unreadable_because` then says why (tests).
  DeathExplainer(std::unique_ptr<KernelLog> log, std::string unreadable_because);

  // Takes what the kernel wrote since the last call. Cheap; non-blocking.
  void Drain();
  // Drains, then explains `death` from the window.
  DeathCause Explain(const WorkerDeath& death);

  bool readable() const { return log_ != nullptr; }
  // Empty while readable: "kernel log /dev/kmsg not readable: Permission denied ...".
  const std::string& unreadable_because() const { return unreadable_because_; }

 private:
  std::unique_ptr<KernelLog> log_;
  std::string unreadable_because_;
  std::deque<KmsgRecord> recent_;
  bool lost_ = false;  // the kernel's ring overwrote records before they were read
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CAUSES_DEATH_EXPLAINER_H_
