// common/fd_passing.h: descriptors over a SOCK_SEQPACKET pair, as ddprun's spare hand-over
// (launcher/preload/spare_pool.h) uses them.
#include "common/fd_passing.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ddprun {
namespace {

// Issue 40: ddprun hands a spare over and closes its end at once. When the spare's "ready" is
// still unread then, the kernel leaves ECONNRESET pending on the spare's end and reports it to
// the next receive before the hand-over queued ahead of it; the spare took that for "ddprun is
// gone" and exited 0, which ddprun counted as a worker that succeeded.
TEST(FdPassingTest, MessageSentBeforeAPeersCloseArrivesThoughOursWasUnread) {
  int ends[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends), 0);
  const int ddprun = ends[0], spare = ends[1];
  ASSERT_EQ(send(spare, "ready", 5, 0), 5);  // never read by ddprun
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const std::string start("start\0X=1\0", 10);
  ASSERT_EQ(SendWithFds(ddprun, start, {pipe_fds[0], pipe_fds[1]}),
            static_cast<ssize_t>(start.size()));
  close(ddprun);

  ReceivedMessage m = ReceiveWithFds(spare, 1 << 16, 2);
  EXPECT_EQ(m.bytes, static_cast<ssize_t>(start.size()));
  EXPECT_EQ(m.message, start);
  EXPECT_FALSE(m.truncated);
  EXPECT_EQ(m.fds.size(), 2u);
  for (int fd : m.fds) close(fd);

  ReceivedMessage end = ReceiveWithFds(spare, 1 << 16, 2);
  EXPECT_EQ(end.bytes, 0) << "then end of file";
  close(spare);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

}  // namespace
}  // namespace ddprun
