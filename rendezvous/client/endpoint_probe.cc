#include "rendezvous/client/endpoint_probe.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/status/statusor.h"
#include "common/strings.h"

namespace ddprun::rendezvous {
namespace {

// One address: the connect's outcome within `timeout`.
ProbeResult ProbeAddress(const addrinfo& ai, std::chrono::milliseconds timeout) {
  const int fd = socket(ai.ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ProbeResult::kNoAnswer;
  ProbeResult result = ProbeResult::kNoAnswer;
  int err = 0;
  if (connect(fd, ai.ai_addr, ai.ai_addrlen) == 0) {
    result = ProbeResult::kAccepting;
  } else if (errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) == 1) {
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      result = err == 0              ? ProbeResult::kAccepting
               : err == ECONNREFUSED ? ProbeResult::kRefused
                                     : ProbeResult::kNoAnswer;
    }
  } else if (errno == ECONNREFUSED) {
    result = ProbeResult::kRefused;
  }
  close(fd);
  return result;
}

}  // namespace

const char* ProbeResultName(ProbeResult result) {
  switch (result) {
    case ProbeResult::kAccepting:
      return "accepting";
    case ProbeResult::kRefused:
      return "refused";
    case ProbeResult::kNoAnswer:
      return "no answer";
  }
  return "unknown";
}

ProbeResult ProbeEndpoint(const std::string& endpoint, std::chrono::milliseconds timeout) {
  absl::StatusOr<HostPort> hp = ParseHostPort("endpoint", endpoint, 0);
  if (!hp.ok() || hp->port <= 0) return ProbeResult::kNoAnswer;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (getaddrinfo(hp->host.c_str(), std::to_string(hp->port).c_str(), &hints, &list) != 0) {
    return ProbeResult::kNoAnswer;
  }
  // Refused only if every address refuses; any listener means the server is up.
  bool any = false, all_refused = true;
  for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    any = true;
    const ProbeResult r = ProbeAddress(*ai, timeout);
    if (r == ProbeResult::kAccepting) {
      freeaddrinfo(list);
      return r;
    }
    if (r != ProbeResult::kRefused) all_refused = false;
  }
  freeaddrinfo(list);
  return any && all_refused ? ProbeResult::kRefused : ProbeResult::kNoAnswer;
}

}  // namespace ddprun::rendezvous
