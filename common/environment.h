// The process environment as a value: what ddprun reads its settings from and what it builds
// for every worker. Thread-compatible (a plain map).
#ifndef DDPRUN_COMMON_ENVIRONMENT_H_
#define DDPRUN_COMMON_ENVIRONMENT_H_

#include <map>
#include <string>

namespace ddprun {

using Environment = std::map<std::string, std::string>;

// This process's environment (environ) as a map.
Environment CurrentEnvironment();

}  // namespace ddprun

#endif  // DDPRUN_COMMON_ENVIRONMENT_H_
