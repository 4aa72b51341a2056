#include "launcher/proc_info.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/file_text.h"

namespace ddprun::launcher {

char ProcessState(pid_t pid) {
  const std::string stat = ReadTextFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');  // the command name may contain spaces and ')'
  if (paren == std::string::npos || paren + 2 >= stat.size()) return '?';
  return stat[paren + 2];
}

std::string KernelSideOf(pid_t pid) {
  std::string out = "== kernel side ==\n";
  std::error_code ec;
  const std::string task_dir = absl::StrCat("/proc/", pid, "/task");
  for (const auto& entry : std::filesystem::directory_iterator(task_dir, ec)) {
    const std::string tid = entry.path().filename().string();
    absl::StrAppend(&out, "TID ", tid, ": state ",
                    std::string(1, ProcessState(std::atoi(tid.c_str()))), ", wchan ",
                    ReadTextFile(entry.path().string() + "/wchan"), "\n");
    const std::string stack = ReadTextFile(entry.path().string() + "/stack");
    if (!stack.empty()) absl::StrAppend(&out, stack);
  }
  return out;
}

}  // namespace ddprun::launcher
