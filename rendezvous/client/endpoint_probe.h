// ProbeEndpoint: one plain TCP connect to a rendezvous endpoint, to tell apart the two reasons
// an agent cannot reach its server. Refused (the host answered, nobody listens) means the server
// process is gone: nobody is deciding anything about this node, so its workers may keep running
// while it waits for a new server. No answer (or no route) means this node may be the one cut
// off while its peers still talk to the server, which gives it up after the lease.
//
// Stateless; thread-safe (it blocks the calling thread for the probe).
#ifndef DDPRUN_RENDEZVOUS_CLIENT_ENDPOINT_PROBE_H_
#define DDPRUN_RENDEZVOUS_CLIENT_ENDPOINT_PROBE_H_

#include <chrono>
#include <string>

namespace ddprun::rendezvous {

enum class ProbeResult {
  kAccepting,  // a listener accepted the connection
  kRefused,    // every address answered with a reset: the host is up, the server is not
  kNoAnswer,   // timed out, unreachable, or the name does not resolve
};

const char* ProbeResultName(ProbeResult result);

// Blocks for at most `timeout` per resolved address. `endpoint` is "host:port" / "[v6]:port".
ProbeResult ProbeEndpoint(const std::string& endpoint, std::chrono::milliseconds timeout);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_CLIENT_ENDPOINT_PROBE_H_
