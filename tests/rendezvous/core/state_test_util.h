// Helpers for the rendezvous state machine tests: building joins and picking messages out of an
// Outbox.
#ifndef DDPRUN_TESTS_RENDEZVOUS_CORE_STATE_TEST_UTIL_H_
#define DDPRUN_TESTS_RENDEZVOUS_CORE_STATE_TEST_UTIL_H_

#include <string>
#include <variant>
#include <vector>

#include "rendezvous/api/run_config.h"
#include "rendezvous/core/outgoing.h"

namespace ddprun::rendezvous::testing {

inline JoinRequest MakeJoin(const std::string& run, const std::string& node, int min_nodes,
                            int max_nodes, int nproc = 2, int max_restarts = 3) {
  JoinRequest r;
  r.node.run_id = run;
  r.node.node_id = node;
  r.node.hostname = "host-" + node;
  r.node.min_nodes = min_nodes;
  r.node.max_nodes = max_nodes;
  r.node.nproc_per_node = nproc;
  r.node.max_restarts = max_restarts;
  r.node.master_port = 29500;
  r.peer_host = "10.0.0." + node;
  r.timeouts.join_timeout = std::chrono::seconds(60);
  r.timeouts.last_call_timeout = std::chrono::seconds(2);
  r.timeouts.keep_alive_interval = std::chrono::seconds(1);
  r.timeouts.keep_alive_max_attempt = 3;
  return r;
}

template <typename T>
const T* Find(const Outbox& out, ConnId conn) {
  for (const Outgoing& o : out) {
    if (o.conn == conn && std::holds_alternative<T>(o.msg)) return &std::get<T>(o.msg);
  }
  return nullptr;
}

template <typename T>
int Count(const Outbox& out) {
  int n = 0;
  for (const Outgoing& o : out) n += std::holds_alternative<T>(o.msg) ? 1 : 0;
  return n;
}

}  // namespace ddprun::rendezvous::testing

#endif  // DDPRUN_TESTS_RENDEZVOUS_CORE_STATE_TEST_UTIL_H_
