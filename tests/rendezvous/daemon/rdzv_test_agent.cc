// rdzv-test-agent: a stand-in agent for real-process rendezvous tests and benchmarks. Joins a
// run with RendezvousClient and prints one line per event on stdout:
//   ASSIGNMENT round=R group_rank=G group_world_size=N world_size=W master=ADDR:PORT restarts=K
//   RESTART <reason> cause=<label>
//   CLOSED code=<absl code name> <message>
//   STEPS SENT n                    (after the first assignment, with --step JSON, repeatable:
//                                    timeline steps sent as the agent's ReportStep would)
// Exits like the agent would: 0 closed OK, 1 restart budget spent, 3 any other close.
// --formerly NODE_ID joins claiming to be that node back under a new id, without its member key
// (what a forger can do; the server must not count it as that node).
// The token comes from $DDPRUN_RDZV_TOKEN. SIGTERM/SIGINT: leave the run and exit 0.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/loop_thread.h"
#include "common/strings.h"
#include "rendezvous/grpc/rendezvous_client.h"
#include "rendezvous/grpc/security.h"

namespace {

using ddprun::rendezvous::Assignment;

class PrintingEvents final : public ddprun::rendezvous::RendezvousEvents {
 public:
  void OnAssignment(const Assignment& a) override {
    {
      absl::MutexLock lock(&mu_);
      assigned_ = true;
    }
    Print(absl::StrCat("ASSIGNMENT round=", a.round, " group_rank=", a.group_rank,
                       " group_world_size=", a.group_world_size, " world_size=", a.world_size,
                       " master=", ddprun::FormatHostPort(a.master_addr, a.master_port),
                       " restarts=", a.restart_count));
  }
  void OnRestart(ddprun::rendezvous::Cause cause, const std::string& reason,
                 const std::optional<ddprun::rendezvous::HangNotice>& hang,
                 const ddprun::rendezvous::RestartFacts& facts) override {
    Print(absl::StrCat("RESTART ", reason, hang.has_value() ? " [hang]" : "",
                       facts.spare_used ? " [spare used]" : "",
                       " cause=", ddprun::rendezvous::CauseLabel(cause)));
  }
  void OnStandby(const ddprun::rendezvous::StandbyNotice& standby) override {
    Print(absl::StrCat("STANDBY round=", standby.round, " members=", standby.members,
                       " position=", standby.position));
  }
  void OnClosed(const absl::Status& status,
                const std::optional<ddprun::rendezvous::HangNotice>&) override {
    Print(absl::StrCat("CLOSED code=", absl::StatusCodeToString(status.code()), " ",
                       status.message()));
    absl::MutexLock lock(&mu_);
    closed_ = status;
  }
  // The close status, once there is one.
  std::optional<absl::Status> closed() {
    absl::MutexLock lock(&mu_);
    return closed_;
  }
  bool assigned() {
    absl::MutexLock lock(&mu_);
    return assigned_;
  }
  absl::Mutex mu_;

  static void Print(const std::string& line) {
    std::fputs((line + "\n").c_str(), stdout);
    std::fflush(stdout);
  }

 private:
  std::optional<absl::Status> closed_ ABSL_GUARDED_BY(mu_);
  bool assigned_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

int main(int argc, char** argv) {
  std::string endpoint, run_id = "test", node_id, nnodes = "1:1", formerly;
  int nproc = 2, max_restarts = 3, node_rank = -1, master_port = 29500;
  double last_call = 0.2, keep_alive = 0.2, read_timeout = 10;
  int keep_alive_attempts = 5;
  CLI::App app{"rendezvous test agent"};
  app.add_option("--endpoint", endpoint)->required();
  app.add_option("--run", run_id);
  app.add_option("--node", node_id);
  app.add_option("--formerly", formerly);
  app.add_option("--nnodes", nnodes);
  app.add_option("--nproc", nproc);
  app.add_option("--max-restarts", max_restarts);
  app.add_option("--node-rank", node_rank);
  app.add_option("--master-port", master_port);
  app.add_option("--last-call", last_call);
  app.add_option("--keep-alive", keep_alive);
  app.add_option("--keep-alive-attempts", keep_alive_attempts);
  app.add_option("--read-timeout", read_timeout);
  std::vector<std::string> steps;
  app.add_option("--step", steps);
  // The liveness path (--rdzv-conf liveness=on and its keys, as ddprun passes them).
  // Default from $RDZV_TEST_AGENT_LIVENESS: the whole daemon suite can run with the path on.
  const char* liveness_env = std::getenv("RDZV_TEST_AGENT_LIVENESS");
  std::string liveness = liveness_env != nullptr ? liveness_env : "off";
  int liveness_interval_ms = 20;
  app.add_option("--liveness", liveness)->check(CLI::IsMember({"on", "off"}));
  app.add_option("--liveness-interval-ms", liveness_interval_ms);
  CLI11_PARSE(app, argc, argv);

  ddprun::rendezvous::NodeInfo node;
  node.run_id = run_id;
  node.node_id = node_id.empty() ? absl::StrCat("agent_", getpid()) : node_id;
  node.hostname = "localhost";
  node.formerly_node_id = formerly;
  const size_t colon = nnodes.find(':');
  node.min_nodes = std::stoi(nnodes.substr(0, colon));
  node.max_nodes =
      colon == std::string::npos ? node.min_nodes : std::stoi(nnodes.substr(colon + 1));
  node.nproc_per_node = nproc;
  node.max_restarts = max_restarts;
  node.requested_node_rank = node_rank;
  node.master_port = master_port;

  ddprun::rendezvous::ClientOptions options;
  options.endpoint = endpoint;
  options.token = ddprun::rendezvous::LoadToken("").value_or("");
  auto ms = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
  options.read_timeout = ms(read_timeout);
  options.timeouts.last_call_timeout = ms(last_call);
  options.timeouts.keep_alive_interval = ms(keep_alive);
  options.timeouts.keep_alive_max_attempt = keep_alive_attempts;
  options.timeouts.liveness.mode = liveness == "on"     ? ddprun::rendezvous::LivenessMode::kOn
                                   : liveness == "auto" ? ddprun::rendezvous::LivenessMode::kAuto
                                                        : ddprun::rendezvous::LivenessMode::kOff;
  options.timeouts.liveness.interval = std::chrono::milliseconds(liveness_interval_ms);

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  ddprun::LoopThread loop;
  PrintingEvents events;
  {
    ddprun::rendezvous::RendezvousClient client(options, &loop);
    client.Join(node, &events);
    bool steps_sent = steps.empty();
    // Waits for a close or a signal. (A 20 ms sigtimedwait tick: a test tool, not the agent.)
    for (;;) {
      if (!steps_sent && events.assigned()) {
        for (const std::string& step : steps) client.ReportStep(step);
        steps_sent = true;
        PrintingEvents::Print(absl::StrCat("STEPS SENT ", steps.size()));
      }
      timespec tick{0, 20 * 1000 * 1000};
      const int sig = sigtimedwait(&signals, nullptr, &tick);
      if (sig > 0) {
        client.Leave("signal");
        return 0;
      }
      if (std::optional<absl::Status> closed = events.closed()) {
        if (closed->ok()) return 0;
        return closed->code() == absl::StatusCode::kResourceExhausted ? 1 : 3;
      }
    }
  }
}
