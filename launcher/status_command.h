// `ddprun status --rdzv-endpoint=HOST:PORT --rdzv-id=ID [--rdzv-conf=token_file=...]`: prints a
// run's round, members with their ranks and addresses, and restarts used.
#ifndef DDPRUN_LAUNCHER_STATUS_COMMAND_H_
#define DDPRUN_LAUNCHER_STATUS_COMMAND_H_

#include <string>
#include <vector>

#include "launcher/host_info.h"

namespace ddprun::launcher {

// `args` follows the word "status". Returns the exit code (0, 2 usage, 3 unreachable).
int RunStatusCommand(const std::vector<std::string>& args, const HostInfo& host);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_STATUS_COMMAND_H_
