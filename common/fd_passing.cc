#include "common/fd_passing.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace ddprun {

ssize_t SendWithFds(int socket, absl::string_view message, const std::vector<int>& fds) {
  std::vector<char> control(CMSG_SPACE(fds.size() * sizeof(int)));
  iovec iov{const_cast<char*>(message.data()), message.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
    memcpy(CMSG_DATA(cmsg), fds.data(), fds.size() * sizeof(int));
  }
  return sendmsg(socket, &msg, MSG_NOSIGNAL);
}

ReceivedMessage ReceiveWithFds(int socket, size_t max_bytes, size_t max_fds) {
  ReceivedMessage out;
  out.message.resize(max_bytes);
  std::vector<char> control(CMSG_SPACE(max_fds * sizeof(int)));
  iovec iov{out.message.data(), out.message.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  // ECONNRESET once: a SOCK_SEQPACKET/SOCK_STREAM peer that closed with messages of ours unread
  // leaves that error pending, and recvmsg reports it before what the peer sent first (ddprun
  // hands a spare over and closes while the spare's "ready" is still unread: issue 40). Reading
  // the error clears it; the next call returns the queued message, or 0 at end of file.
  bool reset_seen = false;
  while (true) {
    out.bytes = recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
    if (out.bytes >= 0) break;
    if (errno == EINTR) continue;
    if (errno != ECONNRESET || reset_seen) break;
    reset_seen = true;
  }
  if (out.bytes >= 0) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        out.fds.push_back(fd);
      }
    }
    out.truncated = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  }
  out.message.resize(out.bytes > 0 ? static_cast<size_t>(out.bytes) : 0);
  return out;
}

}  // namespace ddprun
