// The worker's side of ddprun --preload=native (trainer/io/preload_handover.h), against the wire
// format ddprun's SparePool speaks: a forked child plays the spare, the test plays ddprun.
#include "trainer/io/preload_handover.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/fd_passing.h"
#include "tests/testing/test_env.h"

namespace ddprun::trainer {
namespace {

std::string Recv(int fd) {
  char buf[4096];
  const ssize_t n = recv(fd, buf, sizeof(buf), 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Sends ddprun's hand-over: `env` (KEY=VALUE\0...) with two descriptors.
void SendStart(int fd, const std::string& env, int out_fd, int err_fd) {
  std::string message("start\0", 6);
  message += env;
  ASSERT_EQ(SendWithFds(fd, message, {out_fd, err_fd}), static_cast<ssize_t>(message.size()));
}

class PreloadHandoverTest : public ::testing::Test {
 protected:
  // Forks the spare: its stdout and stderr are memory files, as ddprun makes them; it warms up
  // (prints "warm-up output", fails when `fail_warm_up`), then, once a worker, prints what its
  // environment says and exits 7.
  void StartSpare(bool fail_warm_up) {
    int ends[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends), 0);
    ddprun_ = ends[0];
    child_ = fork();
    ASSERT_GE(child_, 0);
    if (child_ == 0) {
      close(ends[0]);
      int spare_end = dup(ends[1]);  // without CLOEXEC, as ddprun passes it
      dup2(memfd_create("spare-stdout", 0), STDOUT_FILENO);
      dup2(memfd_create("spare-stderr", 0), STDERR_FILENO);
      setenv(kPreloadFdEnv, absl::StrCat(spare_end).c_str(), 1);
      setenv("SPARE_ONLY", "1", 1);
      absl::Status s = BecomeWorkerIfSpare([&]() -> absl::Status {
        fputs("warm-up output\n", stdout);
        return fail_warm_up ? absl::NotFoundError("no data here") : absl::OkStatus();
      });
      if (!s.ok()) _exit(3);
      const char* role = getenv("ROLE");
      printf("worker: ROLE=%s SPARE_ONLY=%s FD=%s\n", role ? role : "-",
             getenv("SPARE_ONLY") ? "set" : "unset", getenv(kPreloadFdEnv) ? "set" : "unset");
      fflush(stdout);
      fputs("to stderr\n", stderr);
      fflush(nullptr);
      _exit(7);
    }
    close(ends[1]);
  }
  int WaitExit() {
    int status = 0;
    EXPECT_EQ(waitpid(child_, &status, 0), child_);
    child_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  void TearDown() override {
    if (child_ > 0) {
      kill(child_, SIGKILL);
      waitpid(child_, nullptr, 0);
    }
    if (ddprun_ >= 0) close(ddprun_);
  }
  int ddprun_ = -1;
  pid_t child_ = -1;
};

TEST_F(PreloadHandoverTest, ReadySpareBecomesTheWorkerWithTheStartsEnvironmentAndStreams) {
  StartSpare(/*fail_warm_up=*/false);
  EXPECT_EQ(Recv(ddprun_), "ready");
  int out[2], err[2];
  ASSERT_EQ(pipe(out), 0);
  ASSERT_EQ(pipe(err), 0);
  SendStart(ddprun_, std::string("ROLE=worker\0PATH=/usr/bin\0", 26), out[1], err[1]);
  close(out[1]);
  close(err[1]);
  EXPECT_EQ(WaitExit(), 7);
  // What the warm-up wrote comes first, where a cold start would have written it.
  EXPECT_EQ(ddprun::testing::ReadUntilEof(out[0]),
            "warm-up output\nworker: ROLE=worker SPARE_ONLY=unset FD=unset\n");
  EXPECT_EQ(ddprun::testing::ReadUntilEof(err[0]), "to stderr\n");
  close(out[0]);
  close(err[0]);
}

TEST_F(PreloadHandoverTest, FailedWarmUpIsReportedAndTheHandOverStillWorks) {
  StartSpare(/*fail_warm_up=*/true);
  EXPECT_EQ(Recv(ddprun_), std::string("failed\0ddp-train's warm-up\0no data here", 39));
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  SendStart(ddprun_, "ROLE=late", out[1], out[1]);
  close(out[1]);
  EXPECT_EQ(WaitExit(), 7);
  EXPECT_EQ(ddprun::testing::ReadUntilEof(out[0]),
            "warm-up output\nworker: ROLE=late SPARE_ONLY=unset FD=unset\nto stderr\n");
  close(out[0]);
}

TEST_F(PreloadHandoverTest, SpareExitsWithoutRunningWhenDdprunGoesOrSpeaksNonsense) {
  StartSpare(/*fail_warm_up=*/false);
  EXPECT_EQ(Recv(ddprun_), "ready");
  close(ddprun_);
  ddprun_ = -1;
  EXPECT_EQ(WaitExit(), 0) << "end of file: exit 0, never the worker";

  StartSpare(/*fail_warm_up=*/false);
  EXPECT_EQ(Recv(ddprun_), "ready");
  ASSERT_EQ(send(ddprun_, "begin", 5, 0), 5);  // no descriptors, no "start\0"
  EXPECT_EQ(WaitExit(), 0);
}

TEST(PreloadHandoverErrorTest, NotASpareReturnsAtOnceAndABadDescriptorIsAnError) {
  unsetenv(kPreloadFdEnv);
  bool warmed = false;
  EXPECT_TRUE(BecomeWorkerIfSpare([&] {
                warmed = true;
                return absl::OkStatus();
              }).ok());
  EXPECT_FALSE(warmed) << "no spare, no warm-up";
  setenv(kPreloadFdEnv, "999", 1);
  absl::Status s = BecomeWorkerIfSpare([] { return absl::OkStatus(); });
  unsetenv(kPreloadFdEnv);
  EXPECT_EQ(s.message(),
            "DDPRUN_PRELOAD_FD=999: not an open socket (only ddprun --preload=native starts a "
            "spare with it)");
}

}  // namespace
}  // namespace ddprun::trainer
