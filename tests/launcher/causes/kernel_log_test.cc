// The kernel log read as records: a socket that keeps record boundaries stands in for
// /dev/kmsg where the test writes the records itself, and the real /dev/kmsg (root only) shows a
// real segfault of a child, as the kernel wrote it.
#include "launcher/causes/kernel_log.h"

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "launcher/causes/death_explainer.h"
#include "launcher/causes/kernel_message.h"

namespace ddprun::launcher {
namespace {

TEST(KernelLogTest, OnlyTheKernelsRecordsAreKept) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  auto log = KernelLog::FromDescriptor(fds[0], "test");
  for (const std::string record :
       {"6,10,100,-;eth0: link up\n", "12,11,101,-;Out of memory: Killed process 1 (forged)\n",
        "not a record", "3,12,102,-;Out of memory: Killed process 42 (python) total-vm:1kB\n"}) {
    ASSERT_EQ(write(fds[1], record.data(), record.size()), static_cast<ssize_t>(record.size()));
  }
  KernelLog::Batch batch = log->ReadAvailable();
  ASSERT_EQ(batch.records.size(), 2u);
  EXPECT_EQ(batch.records[0].seq, 10u);
  EXPECT_EQ(batch.records[1].text, "Out of memory: Killed process 42 (python) total-vm:1kB");
  EXPECT_FALSE(batch.lost);
  EXPECT_TRUE(log->ReadAvailable().records.empty());  // nothing more, and no blocking
  close(fds[1]);
}

// issue 43, S5: DDPRUN_KERNEL_LOG=/dev/zero (a source that never runs dry and holds no record)
// had ReadAvailable loop for ever. Each call is bounded by its reads, and the explainer stops
// reading a file that gives no kmsg records, saying why.
TEST(KernelLogTest, AnEndlessSourceOfNoRecordsIsBoundedAndDropped) {
  auto zero = KernelLog::OpenAtEnd("/dev/zero");
  ASSERT_TRUE(zero.ok()) << zero.status();
  KernelLog::Batch batch = (*zero)->ReadAvailable(100);
  EXPECT_EQ(batch.reads, 100u);
  EXPECT_EQ(batch.unparseable, 100u);
  EXPECT_TRUE(batch.records.empty());
  DeathExplainer explainer("/dev/zero");
  ASSERT_TRUE(explainer.readable());
  explainer.Drain();
  EXPECT_FALSE(explainer.readable());
  EXPECT_EQ(explainer.unreadable_because().rfind("kernel log /dev/zero is not a kernel log", 0), 0u)
      << explainer.unreadable_because();
  explainer.Drain();  // nothing left to read
}

TEST(KernelLogTest, AMissingLogIsNamed) {
  auto log = KernelLog::OpenAtEnd("/nonexistent/kmsg");
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(log.status().message().find("kernel log /nonexistent/kmsg not readable"),
            std::string::npos);
}

// A child that reads address 0 without a SIGSEGV handler of its own (Python's ctypes, with no
// faulthandler): the kernel writes "python3[PID]: segfault at 0 ip ... error 4 in libc.so.6[...]"
// (debug.exception-trace=1, the default) after the log was opened, so the reader sees it. A
// separate program, so that no sanitizer in this test catches the fault first.
TEST(KernelLogTest, ARealSegfaultOfAChildIsInTheLog) {
  const char* python = "/usr/bin/python3";
  if (access(python, X_OK) != 0) GTEST_SKIP() << python << " is not installed";
  auto log = KernelLog::OpenAtEnd("/dev/kmsg");
  if (!log.ok()) GTEST_SKIP() << log.status().message();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    execl(python, "python3", "-c", "import ctypes; ctypes.string_at(0)", nullptr);
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_EQ(WTERMSIG(status), SIGSEGV);
  std::optional<Fault> found;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!found.has_value() && std::chrono::steady_clock::now() < deadline) {
    for (const KmsgRecord& r : (*log)->ReadAvailable().records) {
      auto m = ParseKernelMessage(r.text);
      if (m.has_value() && std::holds_alternative<Fault>(*m) && std::get<Fault>(*m).pid == child) {
        found = std::get<Fault>(*m);
      }
    }
    if (!found.has_value()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!found.has_value()) {
    // The kernel rate-limits these lines (5 s, 10 lines); say so rather than fail on a busy host.
    GTEST_SKIP() << "no segfault line for pid " << child
                 << " within 5 s (rate-limited, or debug.exception-trace=0)";
  }
  EXPECT_EQ(found->what.rfind("segfault at 0", 0), 0u) << found->what;
  EXPECT_EQ(found->comm, "python3");
  EXPECT_EQ(found->library, "libc.so.6");  // where the read of address 0 happened
}

}  // namespace
}  // namespace ddprun::launcher
