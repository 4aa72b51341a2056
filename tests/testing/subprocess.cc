#include "tests/testing/subprocess.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <stdexcept>

namespace ddprun::testing {
namespace {

constexpr char kUnset[] = "\x01unset";

}  // namespace

Subprocess::Subprocess(std::vector<std::string> argv, std::map<std::string, std::string> env,
                       std::string cwd) {
  std::map<std::string, std::string> full;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = strchr(*e, '=');
    if (eq != nullptr) full[std::string(*e, eq - *e)] = eq + 1;
  }
  for (auto& [k, v] : env) {
    if (v == kUnset) {
      full.erase(k);
    } else {
      full[k] = v;
    }
  }
  std::vector<std::string> env_strings;
  for (auto& [k, v] : full) env_strings.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : env_strings) cenv.push_back(e.data());
  cenv.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe2 failed");
  }
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    setpgid(0, 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
    // Tests block signals in some threads; the child starts clean.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvpe(cargv[0], cargv.data(), cenv.data());
    dprintf(2, "exec %s: %s\n", cargv[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid_, pid_);
  close(out_pipe[1]);
  close(err_pipe[1]);
  reader_ = std::thread([this, o = out_pipe[0], e = err_pipe[0]] { ReadLoop(o, e); });
}

Subprocess::~Subprocess() {
  if (!status_.has_value()) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    Wait(std::chrono::seconds(10));
  }
  if (reader_.joinable()) reader_.join();
}

void Subprocess::ReadLoop(int out_fd, int err_fd) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  int open_count = 2;
  char buf[65536];
  while (open_count > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_count;
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      (i == 0 ? out_ : err_).append(buf, n);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  eof_ = true;
  eof_cv_.notify_all();
}

void Subprocess::Signal(int sig) {
  if (!status_.has_value()) kill(pid_, sig);
}

void Subprocess::SignalGroup(int sig) {
  if (!status_.has_value()) kill(-pid_, sig);
}

std::optional<ExitStatus> Subprocess::Wait(std::chrono::milliseconds timeout) {
  if (status_.has_value()) return status_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      ExitStatus s;
      if (WIFEXITED(st)) s.exit_code = WEXITSTATUS(st);
      if (WIFSIGNALED(st)) s.signal = WTERMSIG(st);
      status_ = s;
      // The child is gone; its pipes close once every descendant holding them is gone too.
      std::unique_lock<std::mutex> lock(mu_);
      eof_cv_.wait_for(lock, std::chrono::seconds(2), [this] { return eof_; });
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    // Polling a child's exit from a test thread: 2 ms granularity is well below every bound
    // the tests assert, and avoids owning SIGCHLD in a test binary.
    usleep(2000);
  }
}

bool Subprocess::running() { return !Wait(std::chrono::milliseconds(0)).has_value(); }

std::string Subprocess::out() {
  std::lock_guard<std::mutex> lock(mu_);
  return out_;
}

std::string Subprocess::err() {
  std::lock_guard<std::mutex> lock(mu_);
  return err_;
}

bool Subprocess::WaitForOutput(const std::function<bool(const std::string&)>& pred,
                               std::chrono::milliseconds timeout) {
  return WaitUntil(
      [&] {
        std::lock_guard<std::mutex> lock(mu_);
        return pred(out_ + err_);
      },
      timeout);
}

bool Subprocess::WaitForOutputContains(const std::string& needle,
                                       std::chrono::milliseconds timeout) {
  return WaitForOutput([&](const std::string& s) { return s.find(needle) != std::string::npos; },
                       timeout);
}

bool ExpectAllExit(const std::vector<std::unique_ptr<Subprocess>>& processes, int code,
                   std::chrono::milliseconds timeout) {
  bool all = true;
  for (const auto& p : processes) {
    auto st = p->Wait(timeout);
    EXPECT_TRUE(st.has_value()) << "still running after " << timeout.count() << " ms: " << p->err();
    if (!st.has_value()) {
      all = false;
      continue;
    }
    EXPECT_EQ(st->exit_code, code) << p->err();
    all = all && st->exit_code == code;
  }
  return all;
}

bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    usleep(2000);  // condition polling with a deadline; see the comment in Wait()
  }
}

bool ProcessAlive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace ddprun::testing
