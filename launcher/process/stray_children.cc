#include "launcher/process/stray_children.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include <chrono>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_text.h"

namespace ddprun::launcher {

std::vector<pid_t> ChildrenOfThisProcess() {
  std::vector<pid_t> children;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return children;
  while (dirent* t = readdir(tasks)) {
    if (t->d_name[0] == '.') continue;
    const std::string list = ReadTextFile(absl::StrCat("/proc/self/task/", t->d_name, "/children"));
    for (absl::string_view word : absl::StrSplit(list, ' ', absl::SkipWhitespace())) {
      int pid = 0;
      if (absl::SimpleAtoi(word, &pid) && pid > 0) children.push_back(pid);
    }
  }
  closedir(tasks);
  return children;
}

std::vector<pid_t> KillStrayChildren(const std::set<pid_t>& ours) {
  std::vector<pid_t> killed;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  std::set<pid_t> waiting;  // killed, not yet reaped
  while (true) {
    for (pid_t pid : ChildrenOfThisProcess()) {
      if (ours.count(pid) > 0 || waiting.count(pid) > 0) continue;
      // Its own group too: a detached daemon's helpers often share it, and go at once.
      const pid_t pgid = getpgid(pid);
      if (pgid > 0 && ours.count(pgid) == 0 && pgid != getpgrp()) kill(-pgid, SIGKILL);
      kill(pid, SIGKILL);
      killed.push_back(pid);
      waiting.insert(pid);
    }
    for (auto it = waiting.begin(); it != waiting.end();) {
      const pid_t r = waitpid(*it, nullptr, WNOHANG);
      it = (r == *it || (r < 0 && errno == ECHILD)) ? waiting.erase(it) : std::next(it);
    }
    // Done when nothing is left to reap and no new stray appeared (a killed process's own
    // children are re-parented to us as it dies; the next round takes them).
    if (waiting.empty()) {
      bool more = false;
      for (pid_t pid : ChildrenOfThisProcess()) more = more || ours.count(pid) == 0;
      if (!more) break;
    }
    if (std::chrono::steady_clock::now() > deadline) break;
    const timespec pause{0, 5 * 1000 * 1000};  // re-parenting and SIGKILL take a moment
    nanosleep(&pause, nullptr);
  }
  return killed;
}

}  // namespace ddprun::launcher
