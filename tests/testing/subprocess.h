// A real child process for integration tests: argv, extra environment, stdout and stderr
// captured into strings by a reader thread, waits with deadlines, signals.
#ifndef DDPRUN_TESTS_TESTING_SUBPROCESS_H_
#define DDPRUN_TESTS_TESTING_SUBPROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace ddprun::testing {

struct ExitStatus {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal killed it
  bool exited() const { return signal == 0 && exit_code >= 0; }
};

class Subprocess {
 public:
  // Starts argv[0] (looked up in PATH) with the current environment plus `env` (a value of
  // "\x01unset" removes the variable). The child is in its own process group.
  Subprocess(std::vector<std::string> argv, std::map<std::string, std::string> env = {},
             std::string cwd = "");
  ~Subprocess();  // SIGKILLs the child's process group if still running, reaps it
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int sig);       // to the child only
  void SignalGroup(int sig);  // to the child's process group

  // Waits until the child exits, up to `timeout`; nullopt on timeout. Once it has exited, also
  // waits (up to 2 s more) until its output pipes are drained, so out()/err() are complete
  // unless a descendant it left behind still holds them.
  std::optional<ExitStatus> Wait(std::chrono::milliseconds timeout);
  bool running();

  // Output so far (thread-safe snapshot).
  std::string out();
  std::string err();
  // Waits until `pred(stdout + stderr)` holds, up to `timeout`.
  bool WaitForOutput(const std::function<bool(const std::string&)>& pred,
                     std::chrono::milliseconds timeout);
  bool WaitForOutputContains(const std::string& needle, std::chrono::milliseconds timeout);

 private:
  void ReadLoop(int out_fd, int err_fd);

  pid_t pid_ = -1;
  std::optional<ExitStatus> status_;
  std::mutex mu_;
  std::condition_variable eof_cv_;
  bool eof_ = false;  // both pipes closed
  std::string out_, err_;
  std::thread reader_;
};

// Waits for every process (up to `timeout` each) and expects each to exit with `code`; a
// failure message carries that process's stderr. Returns true when all did.
bool ExpectAllExit(const std::vector<std::unique_ptr<Subprocess>>& processes, int code,
                   std::chrono::milliseconds timeout);

// Polls `pred` every few milliseconds until true or `timeout`; returns the last value.
bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

// True when a process with this pid exists (and is not a zombie).
bool ProcessAlive(pid_t pid);

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_SUBPROCESS_H_
