#include "launcher/process/proc_info.h"

#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_text.h"

namespace ddprun::launcher {

std::vector<pid_t> ThreadsOf(pid_t pid) {
  std::vector<pid_t> tids;
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"), ec)) {
    int tid = 0;
    if (absl::SimpleAtoi(entry.path().filename().string(), &tid)) tids.push_back(tid);
  }
  return tids;
}

namespace {

// The fields of /proc/PID/stat after the command name (state, ppid, pgrp, ...); empty when the
// process is gone or the file unreadable.
std::vector<std::string> StatFieldsAfterName(pid_t pid) {
  const std::string stat = ReadTextFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');  // the command name may contain spaces and ')'
  if (paren == std::string::npos) return {};
  return absl::StrSplit(absl::string_view(stat).substr(paren + 1), ' ', absl::SkipEmpty());
}

}  // namespace

char ProcessState(pid_t pid) {
  const std::vector<std::string> fields = StatFieldsAfterName(pid);
  return fields.empty() || fields[0].empty() ? '?' : fields[0][0];
}

pid_t ProcessGroupOf(pid_t pid) {
  const std::vector<std::string> fields = StatFieldsAfterName(pid);  // state, ppid, pgrp, ...
  int pgrp = 0;
  if (fields.size() < 3 || !absl::SimpleAtoi(fields[2], &pgrp)) return 0;
  return pgrp;
}

pid_t ParentOf(pid_t pid) {
  const std::vector<std::string> fields = StatFieldsAfterName(pid);
  int ppid = 0;
  if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &ppid)) return 0;
  return ppid;
}

std::string KernelSideOf(pid_t pid) {
  std::string out = "== kernel side ==\n";
  for (pid_t tid : ThreadsOf(pid)) {
    const std::string task = absl::StrCat("/proc/", pid, "/task/", tid);
    absl::StrAppend(&out, "TID ", tid, ": state ", std::string(1, ProcessState(tid)), ", wchan ",
                    ReadTextFile(task + "/wchan"), "\n");
    const std::string stack = ReadTextFile(task + "/stack");
    if (!stack.empty()) absl::StrAppend(&out, stack);
  }
  return out;
}

}  // namespace ddprun::launcher
