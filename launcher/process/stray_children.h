// Processes a worker left behind. ddprun is a child subreaper, so a process a worker detached
// (setsid, a double fork) is re-parented to ddprun when its parent exits: outside every worker's
// process group, it would outlive the job. Between worker groups and at the end, whatever
// children ddprun has that are not its own (the orphan guard, --preload spares) are such strays.
#ifndef DDPRUN_LAUNCHER_PROCESS_STRAY_CHILDREN_H_
#define DDPRUN_LAUNCHER_PROCESS_STRAY_CHILDREN_H_

#include <sys/types.h>

#include <set>
#include <vector>

namespace ddprun::launcher {

// The children of this process (all its threads'), from /proc/self/task/*/children.
std::vector<pid_t> ChildrenOfThisProcess();

// SIGKILLs every child not in `ours` (and its process group), reaps it, and repeats for the
// children they leave to us in turn, for at most about a second. Returns the pids killed.
std::vector<pid_t> KillStrayChildren(const std::set<pid_t>& ours);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_PROCESS_STRAY_CHILDREN_H_
