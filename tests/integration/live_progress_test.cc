// issue 43, point 1: a worker's progress bar (tqdm: \r redraws, no newline until it ends) moves
// on ddprun's console whatever the console is: a terminal, a pipe (`ddprun ... | tee log`) or a
// file (every Slurm job's output), with one rank and with several, with and without prefixes;
// and two ranks never share a console line.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using testing::BinPath;
using testing::ReadFile;
using testing::Subprocess;
using testing::TempDir;
using testing::WaitUntil;
using testing::WriteFile;
using namespace std::chrono_literals;

enum class Console { kTerminal, kPipe, kFile };

// Debian's python3, which has tqdm (python3-tqdm), whatever python3 comes first in PATH.
std::map<std::string, std::string> PythonEnv() {
  return {{"PYTHON_EXEC", testing::SystemPython()}};
}

// ddprun with both of its streams on a new terminal, read by a thread as it is written.
class OnATerminal {
 public:
  explicit OnATerminal(const std::vector<std::string>& argv) {
    std::vector<char*> c_argv;
    for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
    c_argv.push_back(nullptr);
    struct winsize size {};
    size.ws_col = 120;
    size.ws_row = 40;
    pid_ = forkpty(&master_, nullptr, nullptr, &size);
    if (pid_ == 0) {
      setenv("PYTHON_EXEC", testing::SystemPython().c_str(), 1);
      execv(c_argv[0], c_argv.data());
      _exit(127);
    }
    reader_ = std::thread([this] {
      char buf[4096];
      for (;;) {
        const ssize_t n = read(master_, buf, sizeof(buf));
        if (n <= 0) {  // EIO: the last writer has gone and everything it wrote has been read
          drained_ = true;
          return;
        }
        std::lock_guard<std::mutex> lock(mu_);
        seen_.append(buf, static_cast<size_t>(n));
      }
    });
  }
  ~OnATerminal() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    reader_.join();
    close(master_);
  }
  std::string Seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  int Wait() {
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        // What the run wrote last may still sit in the terminal's buffer: Seen() after Wait()
        // must hold all of it (a loaded machine schedules the reader late).
        while (!drained_ && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(20ms);
        }
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(20ms);  // polling a child's exit: no fd to wait on here
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int master_ = -1;
  bool exited_ = false;
  std::atomic<bool> drained_{false};  // the reader saw the end of the terminal's output
  std::thread reader_;
  std::mutex mu_;
  std::string seen_;
};

// One ddprun run of progress_worker.py with its console on `console`.
class ProgressRun {
 public:
  ProgressRun(Console console, int ranks, bool prefixed, const TempDir& dir) : console_(console) {
    gate_ = dir.File("gate");
    std::vector<std::string> argv = {BinPath("ddprun"), "--standalone",
                                     absl::StrCat("--nproc-per-node=", ranks)};
    if (prefixed) argv.push_back("--tee=3");
    argv.push_back(testing::IntegrationScript("progress_worker.py"));
    argv.push_back(gate_);
    switch (console) {
      case Console::kTerminal:
        terminal_ = std::make_unique<OnATerminal>(argv);
        break;
      case Console::kPipe:
        piped_ = std::make_unique<Subprocess>(argv, PythonEnv());
        break;
      case Console::kFile: {
        // As sbatch runs a job step: both streams to one file.
        file_ = dir.File("slurm-1.out");
        std::vector<std::string> sh = {"/bin/sh", "-c", "exec \"$@\" >\"$0\" 2>&1", file_};
        sh.insert(sh.end(), argv.begin(), argv.end());
        piped_ = std::make_unique<Subprocess>(sh, PythonEnv());
        break;
      }
    }
  }
  std::string Seen() {
    switch (console_) {
      case Console::kTerminal:
        return terminal_->Seen();
      case Console::kPipe:
        return piped_->out() + piped_->err();
      case Console::kFile:
        return ReadFile(file_);
    }
    return "";
  }
  void OpenGate() { WriteFile(gate_, ""); }
  int Wait() {
    if (terminal_) return terminal_->Wait();
    auto st = piped_->Wait(60s);
    return st.has_value() ? st->exit_code : -1;
  }

 private:
  Console console_;
  std::string gate_, file_;
  std::unique_ptr<OnATerminal> terminal_;
  std::unique_ptr<Subprocess> piped_;
};

// Every piece of a console line (between \r and \n) names at most one rank's bar, at its start
// (after the rank's prefix when prefixed): no rank's text landed inside another's line.
void ExpectNoSharedLines(const std::string& seen, bool prefixed) {
  for (absl::string_view piece : absl::StrSplit(seen, absl::ByAnyChar("\r\n"))) {
    const size_t first = piece.find("@@");
    if (first == absl::string_view::npos) continue;
    EXPECT_EQ(piece.find("@@", first + 2), absl::string_view::npos) << "shared line: " << piece;
    const std::string rank(1, piece.size() > first + 2 ? piece[first + 2] : '?');
    const std::string head = prefixed ? absl::StrCat("[default", rank, "]:") : "";
    EXPECT_EQ(std::string(piece.substr(0, first)), head) << "shared line: " << piece;
  }
}

std::string Name(Console c) {
  return c == Console::kTerminal ? "terminal" : c == Console::kPipe ? "pipe" : "file";
}

TEST(LiveProgressTest, BarsMoveOnATerminalAPipeAndAFile) {
  for (Console console : {Console::kFile, Console::kPipe, Console::kTerminal}) {
    for (int ranks : {1, 2}) {
      for (bool prefixed : {false, true}) {
        SCOPED_TRACE(
            absl::StrCat(Name(console), ", ", ranks, " rank(s)", prefixed ? ", prefixed" : ""));
        TempDir dir;
        ProgressRun run(console, ranks, prefixed, dir);
        // Every bar is half way and stays there until the gate opens: its update must be on
        // the console now, while its line is unfinished.
        auto all_half_way = [&] {
          const std::string seen = run.Seen();
          for (int r = 0; r < ranks; ++r) {
            if (seen.find(absl::StrCat("@@", r, ":  50%")) == std::string::npos) return false;
          }
          return true;
        };
        const bool live = WaitUntil(all_half_way, 30s);
        const std::string before = run.Seen();
        EXPECT_TRUE(live) << "console so far: " << before;
        EXPECT_EQ(before.find("100%"), std::string::npos) << before;
        run.OpenGate();
        EXPECT_EQ(run.Wait(), 0) << run.Seen();
        const std::string seen = run.Seen();
        for (int r = 0; r < ranks; ++r) {
          EXPECT_NE(seen.find(absl::StrCat("@@", r, ": 100%")), std::string::npos) << seen;
          EXPECT_NE(seen.find(absl::StrCat("@@", r, " finished")), std::string::npos) << seen;
        }
        ExpectNoSharedLines(seen, prefixed);
      }
    }
  }
}

// Without a prefix on a file, one rank's bytes reach it exactly as the worker wrote them (the
// byte-exact guarantee of issue 28 holds with the live updates).
TEST(LiveProgressTest, OneRankWithoutPrefixKeepsItsBytesInAFile) {
  TempDir dir;
  const std::string script = dir.File("bytes.py");
  WriteFile(script,
            "import sys, time\n"
            "for s in ['a\\rb', '\\r\\x1b[2K50%', '\\r100%\\n', 'tail']:\n"
            "    sys.stdout.write(s); sys.stdout.flush(); time.sleep(0.15)\n");
  const std::string out = dir.File("out");
  Subprocess p({"/bin/sh", "-c", "exec \"$@\" >\"$0\"", out, BinPath("ddprun"), "--standalone",
                "--nproc-per-node=1", script},
               PythonEnv());
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(out).find("50%") != std::string::npos; }, 30s))
      << ReadFile(out);
  auto st = p.Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << p.err();
  EXPECT_EQ(ReadFile(out), "a\rb\r\x1b[2K50%\r100%\ntail");
}

}  // namespace
}  // namespace ddprun
