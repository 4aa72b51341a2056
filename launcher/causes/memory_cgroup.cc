#include "launcher/causes/memory_cgroup.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_text.h"

namespace ddprun::launcher {

namespace {

// v1 writes "no limit" as the largest page-aligned signed value (9223372036854771712).
constexpr int64_t kV1NoLimit = int64_t{1} << 62;

}  // namespace

std::optional<MemoryCgroupRef> MemoryCgroupOf(absl::string_view proc_pid_cgroup) {
  std::optional<MemoryCgroupRef> v2;
  for (absl::string_view line : absl::StrSplit(proc_pid_cgroup, '\n', absl::SkipWhitespace())) {
    // "ID:CONTROLLERS:PATH"; the path may itself hold ':'.
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    const std::string path(absl::StripTrailingAsciiWhitespace(f[2]));
    if (f[0] == "0" && f[1].empty()) {
      v2 = MemoryCgroupRef{CgroupVersion::kV2, path};
      continue;
    }
    for (absl::string_view controller : absl::StrSplit(f[1], ',')) {
      if (controller == "memory") return MemoryCgroupRef{CgroupVersion::kV1, path};
    }
  }
  return v2;
}

std::optional<int64_t> OomKillCount(absl::string_view counters) {
  for (absl::string_view line : absl::StrSplit(counters, '\n', absl::SkipWhitespace())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    int64_t n = 0;
    if (f.size() == 2 && f[0] == "oom_kill" && absl::SimpleAtoi(f[1], &n)) return n;
  }
  return std::nullopt;
}

std::optional<int64_t> MemoryLimitBytes(absl::string_view limit_file) {
  int64_t bytes = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(limit_file), &bytes)) return std::nullopt;
  if (bytes >= kV1NoLimit) return std::nullopt;
  return bytes;
}

std::optional<MemoryCgroupRef> MemoryCgroupReader::Of(pid_t pid) const {
  return MemoryCgroupOf(ReadTextFile(absl::StrCat(files_.proc_root, "/", pid, "/cgroup")));
}

std::string MemoryCgroupReader::Dir(const MemoryCgroupRef& cgroup) const {
  const std::string path = cgroup.path == "/" ? "" : cgroup.path;
  return cgroup.version == CgroupVersion::kV1 ? absl::StrCat(files_.cgroup_root, "/memory", path)
                                              : absl::StrCat(files_.cgroup_root, path);
}

std::optional<int64_t> MemoryCgroupReader::OomKills(const MemoryCgroupRef& cgroup) const {
  return OomKillCount(ReadTextFile(absl::StrCat(Dir(cgroup), cgroup.version == CgroupVersion::kV1
                                                                 ? "/memory.oom_control"
                                                                 : "/memory.events")));
}

std::optional<int64_t> MemoryCgroupReader::LimitBytes(const MemoryCgroupRef& cgroup) const {
  return MemoryLimitBytes(ReadTextFile(
      absl::StrCat(Dir(cgroup), cgroup.version == CgroupVersion::kV1 ? "/memory.limit_in_bytes"
                                                                     : "/memory.max")));
}

}  // namespace ddprun::launcher
