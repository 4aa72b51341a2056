// How many bytes this process can still take, as the kernel says, so that a size a peer
// announces cannot make it allocate more (in-process recovery's state hand-over, a checkpoint
// broadcast). Free functions; thread-safe.
#ifndef DDPRUN_TRAINER_IO_MEMORY_BOUND_H_
#define DDPRUN_TRAINER_IO_MEMORY_BOUND_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace ddprun::trainer {

struct MemoryBound {
  int64_t bytes = 0;
  std::string what;  // "memory available", "memory left in this cgroup"
};

// Pure: the smaller of /proc/meminfo's MemAvailable and a cgroup v2 limit's headroom
// (memory.max - memory.current; "max" or "" is no limit). nullopt when neither says anything.
std::optional<MemoryBound> MemoryBoundFrom(absl::string_view meminfo, absl::string_view cgroup_max,
                                           absl::string_view cgroup_current);

// Reads /proc/meminfo and this process's cgroup (/proc/self/cgroup, /sys/fs/cgroup/...).
std::optional<MemoryBound> AvailableMemory();

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IO_MEMORY_BOUND_H_
