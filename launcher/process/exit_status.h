// How a process ended, from its wait status (waitpid's): one line for the logs. Pure.
#ifndef DDPRUN_LAUNCHER_PROCESS_EXIT_STATUS_H_
#define DDPRUN_LAUNCHER_PROCESS_EXIT_STATUS_H_

#include <string>

namespace ddprun::launcher {

// "exit code 3" / "killed by signal 9".
std::string DescribeExit(int wait_status);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_PROCESS_EXIT_STATUS_H_
