#include "trainer/io/memory_bound.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ddprun::trainer {
namespace {

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str().substr(0, 1 << 20);
}

std::optional<int64_t> MemAvailable(absl::string_view meminfo) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, "kB");
    int64_t kib = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib) && kib >= 0) return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace

std::optional<MemoryBound> MemoryBoundFrom(absl::string_view meminfo, absl::string_view cgroup_max,
                                           absl::string_view cgroup_current) {
  std::optional<MemoryBound> bound;
  if (std::optional<int64_t> avail = MemAvailable(meminfo)) {
    bound = MemoryBound{*avail, "memory available"};
  }
  int64_t max = 0, current = 0;
  if (absl::SimpleAtoi(absl::StripAsciiWhitespace(cgroup_max), &max) &&
      absl::SimpleAtoi(absl::StripAsciiWhitespace(cgroup_current), &current)) {
    const int64_t left = max > current ? max - current : 0;
    if (!bound.has_value() || left < bound->bytes) {
      bound = MemoryBound{left, "memory left in this cgroup"};
    }
  }
  return bound;
}

std::optional<MemoryBound> AvailableMemory() {
  std::string cgroup_dir;
  for (absl::string_view line : absl::StrSplit(ReadSmallFile("/proc/self/cgroup"), '\n')) {
    if (absl::ConsumePrefix(&line, "0::")) cgroup_dir = "/sys/fs/cgroup" + std::string(line);
  }
  std::string max, current;
  if (!cgroup_dir.empty()) {
    max = ReadSmallFile(cgroup_dir + "/memory.max");
    current = ReadSmallFile(cgroup_dir + "/memory.current");
  }
  return MemoryBoundFrom(ReadSmallFile("/proc/meminfo"), max, current);
}

}  // namespace ddprun::trainer
