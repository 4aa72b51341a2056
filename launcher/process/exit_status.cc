#include "launcher/process/exit_status.h"

#include <sys/wait.h>

#include "absl/strings/str_cat.h"

namespace ddprun::launcher {

std::string DescribeExit(int wait_status) {
  if (WIFSIGNALED(wait_status)) return absl::StrCat("killed by signal ", WTERMSIG(wait_status));
  return absl::StrCat("exit code ", WEXITSTATUS(wait_status));
}

}  // namespace ddprun::launcher
