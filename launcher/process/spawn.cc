#include "launcher/process/spawn.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace ddprun::launcher {
namespace {

// What a child that could not become the worker reports first, before errno.
constexpr int kExecFailed = 1;
constexpr int kAffinityFailed = 2;

}  // namespace

absl::StatusOr<std::string> FindProgram(const std::string& name, const std::string& path) {
  if (name.find('/') != std::string::npos) return name;
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(absl::StrCat(name, ": not found in PATH"));
}

absl::StatusOr<std::string> FindProgramInEnv(const std::string& name, const Environment& env) {
  auto it = env.find("PATH");
  return FindProgram(name, it == env.end() ? "/usr/local/bin:/usr/bin:/bin" : it->second);
}

absl::StatusOr<pid_t> Spawn(const SpawnRequest& request) {
  auto program = FindProgramInEnv(request.program, request.env);
  if (!program.ok()) return program.status();

  // Everything the child touches is prepared before fork: after fork only async-signal-safe
  // calls are allowed (the agent may have other threads, e.g. gRPC's).
  std::vector<std::string> env_strings;
  env_strings.reserve(request.env.size());
  for (const auto& [k, v] : request.env) env_strings.push_back(absl::StrCat(k, "=", v));
  std::vector<char*> argv, envp;
  for (const auto& a : request.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int cpu : request.cpus) {
    if (cpu < CPU_SETSIZE) CPU_SET(cpu, &cpus);
  }

  // The child reports a failure through this pipe (what failed, then errno); a successful exec
  // closes it.
  int error_pipe[2];
  if (pipe2(error_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(error_pipe[0]);
    close(error_pipe[1]);
    return absl::ResourceExhaustedError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the agent died before prctl took effect
    // Lets the agent's stack tool (eu-stack, gdb: children of the agent, not ancestors of the
    // worker) attach under Yama's ptrace_scope=1 when ddprun does not run as root.
    prctl(PR_SET_PTRACER, parent, 0, 0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    if (request.stdout_fd >= 0) dup2(request.stdout_fd, 1);
    if (request.stderr_fd >= 0) dup2(request.stderr_fd, 2);
    if (request.keep_fd >= 0) fcntl(request.keep_fd, F_SETFD, 0);
    int failure[2] = {kExecFailed, 0};
    if (!request.cpus.empty() && sched_setaffinity(0, sizeof(cpus), &cpus) != 0) {
      failure[0] = kAffinityFailed;
    } else {
      execve(program->c_str(), argv.data(), envp.data());
    }
    failure[1] = errno;
    ssize_t ignored = write(error_pipe[1], failure, sizeof(failure));
    (void)ignored;
    _exit(127);
  }
  // Also set from the parent, so the group exists even before the child runs (no race with an
  // immediate stop).
  setpgid(pid, pid);
  close(error_pipe[1]);
  int failure[2] = {0, 0};
  ssize_t n;
  do {
    n = read(error_pipe[0], failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  close(error_pipe[0]);
  if (n == sizeof(failure)) {
    waitpid(pid, nullptr, 0);
    if (failure[0] == kAffinityFailed) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot bind to CPUs ", absl::StrJoin(request.cpus, ","), ": ", strerror(failure[1])));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot execute ", *program, ": ", strerror(failure[1])));
  }
  return pid;
}

}  // namespace ddprun::launcher
