// Runs an EventLoop the way the agent does for the children it starts: waitpid(-1) routed to
// `on_exit` (every 5 ms here, instead of SIGCHLD), until something stops the loop or `deadline`.
#ifndef DDPRUN_TESTS_LAUNCHER_HEALTH_REAPING_LOOP_H_
#define DDPRUN_TESTS_LAUNCHER_HEALTH_REAPING_LOOP_H_

#include <sys/wait.h>

#include <functional>

#include "common/clock.h"
#include "common/event_loop.h"

namespace ddprun::launcher {

inline void RunReaping(EventLoop* loop, const std::function<void(pid_t, int)>& on_exit,
                       Duration deadline) {
  std::function<void()> reap = [&] {
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) on_exit(pid, status);
    loop->AddTimerAfter(std::chrono::milliseconds(5), reap);
  };
  reap();
  loop->AddTimerAfter(deadline, [loop] { loop->Stop(); });
  loop->Run();
}

}  // namespace ddprun::launcher

#endif  // DDPRUN_TESTS_LAUNCHER_HEALTH_REAPING_LOOP_H_
