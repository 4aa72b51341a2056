// A worker's memory cgroup and that cgroup's own count of OOM kills: evidence of an OOM kill
// that needs no kernel log (which an unprivileged agent often cannot read: Debian and others set
// kernel.dmesg_restrict=1, and Slurm runs jobs as their user). cgroup v2 counts them in
// memory.events ("oom_kill N"), v1 in memory.oom_control ("oom_kill N", kernel 4.13 and later);
// the limit is memory.max (v2) or memory.limit_in_bytes (v1).
//
// Parsing is pure; MemoryCgroupReader reads /proc/PID/cgroup and the cgroup files under roots
// that tests point at recorded files.
#ifndef DDPRUN_LAUNCHER_CAUSES_MEMORY_CGROUP_H_
#define DDPRUN_LAUNCHER_CAUSES_MEMORY_CGROUP_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace ddprun::launcher {

enum class CgroupVersion { kV1, kV2 };

struct MemoryCgroupRef {
  CgroupVersion version = CgroupVersion::kV2;
  std::string path;  // within its hierarchy: "/slurm/uid_1000/job_42/step_0"
  bool operator==(const MemoryCgroupRef& o) const { return version == o.version && path == o.path; }
};

// The memory cgroup in /proc/PID/cgroup's text: the v1 line whose controllers include memory
// ("4:memory:/job"), else the v2 line ("0::/job"); nullopt when neither is there.
std::optional<MemoryCgroupRef> MemoryCgroupOf(absl::string_view proc_pid_cgroup);

// The "oom_kill N" line of memory.events or memory.oom_control; nullopt when it has none.
std::optional<int64_t> OomKillCount(absl::string_view counters);

// A limit file's bytes: nullopt for "max" (v2) or v1's "no limit" (at least 2^62).
std::optional<int64_t> MemoryLimitBytes(absl::string_view limit_file);

// Where the files are: /proc and the cgroup mount (v1's memory hierarchy is ROOT/memory).
struct CgroupFiles {
  std::string proc_root = "/proc";
  std::string cgroup_root = "/sys/fs/cgroup";
};

class MemoryCgroupReader {
 public:
  explicit MemoryCgroupReader(CgroupFiles files = {}) : files_(std::move(files)) {}

  std::optional<MemoryCgroupRef> Of(pid_t pid) const;
  std::optional<int64_t> OomKills(const MemoryCgroupRef& cgroup) const;
  std::optional<int64_t> LimitBytes(const MemoryCgroupRef& cgroup) const;

 private:
  std::string Dir(const MemoryCgroupRef& cgroup) const;

  const CgroupFiles files_;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CAUSES_MEMORY_CGROUP_H_
