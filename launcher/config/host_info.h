// Facts about this host that option parsing needs (CPU and GPU counts, hostname), gathered
// behind a struct so tests can pass their own.
#ifndef DDPRUN_LAUNCHER_CONFIG_HOST_INFO_H_
#define DDPRUN_LAUNCHER_CONFIG_HOST_INFO_H_

#include <string>

#include "common/environment.h"

namespace ddprun::launcher {

struct HostInfo {
  int cpu_count = 1;
  int gpu_count = 0;
  std::string hostname;
};

// GPUs visible to this node without loading CUDA: CUDA_VISIBLE_DEVICES when set (a list of
// indices or UUIDs; empty or "-1" means none), else the /dev/nvidiaN device nodes under
// `dev_dir`.
int CountVisibleGpus(const Environment& env, const std::string& dev_dir = "/dev");

// Reads this host's facts.
HostInfo DetectHostInfo(const Environment& env);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONFIG_HOST_INFO_H_
