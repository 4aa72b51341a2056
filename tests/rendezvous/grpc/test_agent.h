// A simulated agent for rendezvous tests: a RendezvousClient, an LoopThread standing in for the
// agent's loop, and a recorder of the events it receives with waits on conditions.
#ifndef DDPRUN_TESTS_RENDEZVOUS_GRPC_TEST_AGENT_H_
#define DDPRUN_TESTS_RENDEZVOUS_GRPC_TEST_AGENT_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/loop_thread.h"
#include "rendezvous/grpc/rendezvous_client.h"

namespace ddprun::rendezvous::testing {

struct Event {
  enum Kind { kAssignment, kRestart, kClosed, kReconnecting, kResumed, kStandby } kind;
  Assignment assignment;
  std::string reason;
  absl::Status status;
  std::optional<HangNotice> hang;
  Cause cause = Cause::kUnspecified;  // kRestart
  RestartFacts facts;                 // kRestart
  StandbyNotice standby;              // kStandby
};

class Recorder final : public RendezvousEvents {
 public:
  void OnAssignment(const Assignment& a) override { Add({Event::kAssignment, a, "", {}}); }
  void OnRestart(Cause cause, const std::string& reason, const std::optional<HangNotice>& hang,
                 const RestartFacts& facts) override {
    Add({Event::kRestart, {}, reason, {}, hang, cause, facts});
  }
  void OnStandby(const StandbyNotice& standby) override {
    Add({Event::kStandby, {}, "", {}, {}, Cause::kUnspecified, {}, standby});
  }
  void OnClosed(const absl::Status& s, const std::optional<HangNotice>& hang) override {
    Add({Event::kClosed, {}, "", s, hang});
  }
  void OnReconnecting(const std::string& why) override {
    Add({Event::kReconnecting, {}, why, {}, {}});
  }
  void OnResumed(int64_t round) override {
    Assignment a;
    a.round = round;
    Add({Event::kResumed, a, "", {}, {}});
  }
  // How many events of `kind` so far.
  int CountOf(Event::Kind kind) {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const Event& e : events_) n += e.kind == kind ? 1 : 0;
    return n;
  }
  bool WaitKind(Event::Kind kind, std::chrono::milliseconds t) {
    return WaitFor(
        [kind](const std::vector<Event>& events) {
          for (const Event& e : events) {
            if (e.kind == kind) return true;
          }
          return false;
        },
        t);
  }

  std::vector<Event> events() {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  // Waits until `pred(events)` holds, up to `timeout`.
  bool WaitFor(const std::function<bool(const std::vector<Event>&)>& pred,
               std::chrono::milliseconds timeout) {
    absl::MutexLock lock(&mu_);
    auto cond = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pred(events_); };
    return mu_.AwaitWithTimeout(absl::Condition(&cond), absl::FromChrono(timeout));
  }
  // The first assignment of round > `after_round`.
  std::optional<Assignment> WaitAssignment(int64_t after_round, std::chrono::milliseconds t) {
    std::optional<Assignment> found;
    WaitFor(
        [&](const std::vector<Event>& events) {
          for (const Event& e : events) {
            if (e.kind == Event::kAssignment && e.assignment.round > after_round) {
              found = e.assignment;
              return true;
            }
          }
          return false;
        },
        t);
    return found;
  }
  std::optional<absl::Status> WaitClosed(std::chrono::milliseconds t) {
    std::optional<absl::Status> found;
    WaitFor(
        [&](const std::vector<Event>& events) {
          for (const Event& e : events) {
            if (e.kind == Event::kClosed) {
              found = e.status;
              return true;
            }
          }
          return false;
        },
        t);
    return found;
  }
  std::optional<std::string> WaitRestart(std::chrono::milliseconds t) {
    std::optional<std::string> found;
    WaitFor(
        [&](const std::vector<Event>& events) {
          for (const Event& e : events) {
            if (e.kind == Event::kRestart) {
              found = e.reason;
              return true;
            }
          }
          return false;
        },
        t);
    return found;
  }

 private:
  void Add(Event e) {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(e));
  }
  absl::Mutex mu_;
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
};

inline NodeInfo MakeNode(const std::string& run, const std::string& id, int min_nodes,
                         int max_nodes, int nproc = 2, int max_restarts = 3) {
  NodeInfo n;
  n.run_id = run;
  n.node_id = id;
  n.hostname = "host-" + id;
  n.min_nodes = min_nodes;
  n.max_nodes = max_nodes;
  n.nproc_per_node = nproc;
  n.max_restarts = max_restarts;
  n.master_port = 30000;
  return n;
}

inline ClientOptions FastClientOptions(const std::string& endpoint, const std::string& token) {
  ClientOptions o;
  o.endpoint = endpoint;
  o.token = token;
  o.read_timeout = std::chrono::seconds(10);
  o.timeouts.last_call_timeout = std::chrono::milliseconds(200);
  o.timeouts.keep_alive_interval = std::chrono::milliseconds(200);
  o.timeouts.keep_alive_max_attempt = 5;
  o.timeouts.join_timeout = std::chrono::seconds(30);
  return o;
}

// Members are destroyed client first, then the loop its events are posted to.
struct TestAgent {
  TestAgent(const ClientOptions& options, const NodeInfo& node) : node(node) {
    client = std::make_unique<RendezvousClient>(options, &loop);
    client->Join(node, &recorder);
  }
  LoopThread loop;
  Recorder recorder;
  NodeInfo node;
  std::unique_ptr<RendezvousClient> client;
};

}  // namespace ddprun::rendezvous::testing

#endif  // DDPRUN_TESTS_RENDEZVOUS_GRPC_TEST_AGENT_H_
