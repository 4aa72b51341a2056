// Reads a ddprun YAML config file into flag-name -> value text, remembering each value's line so
// that errors can name "FILE:LINE".
//
//   nnodes: 1:2
//   nproc-per-node: 4          # dashes or underscores, as on the command line
//   rdzv-conf: {join_timeout: 60, is_host: true}   # or "join_timeout=60,is_host=1"
//   local-ranks-filter: [0, 1]
//   script: train.py           # the training script (or module / binary)
//   script-args: [--epochs, "3"]
#ifndef DDPRUN_LAUNCHER_CONFIG_YAML_CONFIG_H_
#define DDPRUN_LAUNCHER_CONFIG_YAML_CONFIG_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ddprun::launcher {

struct ConfigValue {
  // What the YAML gave: a plain value (or nothing), a list, or a mapping.
  enum class Shape { kScalar, kList, kMap };
  std::string key;  // normalised flag name with dashes: "nproc-per-node"
  Shape shape = Shape::kScalar;
  std::string value;              // scalar text; lists joined by ',' ; maps as "k=v,k=v"
  std::vector<std::string> list;  // for `script-args`: the items
  int line = 0;                   // 1-based
};

// The largest config file read (1 MiB): a config is a few dozen lines, and yaml-cpp takes about
// fifty times a file's size in memory.
inline constexpr size_t kMaxConfigFileBytes = 1 << 20;

// Parses `path`. A YAML syntax error, a non-mapping document or a key given twice (in either
// spelling: nproc-per-node and nproc_per_node are one key; script and entrypoint, script-args
// and args too) is kInvalidArgument with "FILE:LINE: ..." in the message; a file that cannot
// be read, is a directory or is larger than kMaxConfigFileBytes is kInvalidArgument
// "--config=FILE: ...". Keys are not otherwise checked here (the caller knows the flags).
absl::StatusOr<std::vector<ConfigValue>> LoadYamlConfig(const std::string& path);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONFIG_YAML_CONFIG_H_
