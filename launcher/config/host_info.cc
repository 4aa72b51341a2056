#include "launcher/config/host_info.h"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <cctype>
#include <cstring>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ddprun::launcher {

int CountVisibleGpus(const Environment& env, const std::string& dev_dir) {
  auto it = env.find("CUDA_VISIBLE_DEVICES");
  if (it != env.end()) {
    // CUDA stops at the first invalid entry; "-1" is the usual way to hide every GPU.
    int count = 0;
    for (absl::string_view item : absl::StrSplit(it->second, ',')) {
      item = absl::StripAsciiWhitespace(item);
      if (item.empty() || item.front() == '-') break;
      ++count;
    }
    return count;
  }
  DIR* dir = opendir(dev_dir.c_str());
  if (dir == nullptr) return 0;
  int count = 0;
  while (dirent* entry = readdir(dir)) {
    const char* name = entry->d_name;
    if (strncmp(name, "nvidia", 6) != 0 || name[6] == '\0') continue;
    bool digits = true;
    for (const char* p = name + 6; *p != '\0'; ++p)
      digits &= isdigit(static_cast<unsigned char>(*p)) != 0;
    if (digits) ++count;
  }
  closedir(dir);
  return count;
}

HostInfo DetectHostInfo(const Environment& env) {
  HostInfo info;
  cpu_set_t set;
  CPU_ZERO(&set);
  info.cpu_count = sched_getaffinity(0, sizeof(set), &set) == 0
                       ? CPU_COUNT(&set)
                       : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (info.cpu_count < 1) info.cpu_count = 1;
  info.gpu_count = CountVisibleGpus(env);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  info.hostname = host;
  return info;
}

}  // namespace ddprun::launcher
