// SpareCluster: a ddprun job of `ddp-train mnist` on namespaced hosts (net_hosts.h) with spare
// nodes beside its members, for the spare tests (tests/spares/spare_test.cc) and the spare
// bench (bench/spares/). Host 1 holds the rendezvous server (ddprun-rdzv or a one-member etcd;
// with the built-in server, host 2's agent hosts it), hosts 2..members+1 the members (one worker
// each), the hosts after them the spares, started once the members train. The cluster injects
// a fault into a host (every process SIGKILLed, every process SIGSTOPped, its link cut), watches
// the world come back and reads what each agent logged: its round and group rank, its workers'
// pids. Not thread-safe: one test thread drives it. Owns every process and namespace it makes.
#ifndef DDPRUN_TESTS_TESTING_SPARE_CLUSTER_H_
#define DDPRUN_TESTS_TESTING_SPARE_CLUSTER_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/testing/net_hosts.h"
#include "tests/testing/rdzv_daemon.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_cgroup.h"

namespace ddprun::testing {

enum class RdzvServer { kBuiltIn, kRdzvDaemon, kEtcd };
const char* RdzvServerName(RdzvServer server);

enum class HostFault {
  kKill,    // every process on the host SIGKILLed: its connections are reset (RST)
  kFreeze,  // every process on the host SIGSTOPped: silent, connections open
  kCut,     // the host's link down: silent, nothing reset
};
const char* HostFaultName(HostFault fault);

// Pids of a host's network namespace (`ip netns pids`): everything that runs there.
std::vector<pid_t> NamespacePids(const std::string& ns);
// An agent's workers: its children that lead process groups of their own (the agent's helpers
// stay in its group), --preload spares not yet handed a start aside.
std::vector<pid_t> AgentWorkerPids(pid_t agent);

// Moves `agent`'s workers, once it has any, into `cgroup` (cgroup.procs: each whole thread
// group); not the agent: a throttled agent would be slow to heartbeat, and with a spare ready the
// liveness detector would lose its node. "" when moved, else what failed (no worker within
// `limit`, a write refused).
std::string MoveWorkersInto(pid_t agent, const TestCgroup& cgroup, std::chrono::seconds limit);

struct SpareClusterOptions {
  RdzvServer server = RdzvServer::kRdzvDaemon;
  int members = 3;
  int spares = 1;
  bool elastic = false;    // --nnodes=members-1:members; else a fixed world, --nnodes=members
  bool in_process = true;  // --restart-mode=in-process --preload=native; else cold
  int epochs = 2;
  int steps_per_epoch = 30;  // --max-steps
  int batch_size = 16;
  int checkpoint_every = 5;
  // The lease (keep_alive_interval x keep_alive_max_attempt): today's only detector of a
  // frozen or cut-off host.
  double keep_alive_interval_s = 0.5;
  int keep_alive_max_attempt = 3;
  std::string extra_rdzv_conf;           // appended to --rdzv-conf, e.g. "liveness=on"
  std::string first_spare_health_check;  // --health-check of the first spare ("": none)
  bool evict_slow = false;               // --evict-slow: a node named slow is replaced
  // --preflight=VALUE ("": ddprun's default, auto, as the bench runs it). Off for the tests that
  // are not about it: a GEMM measured beside the other hosts of a shared 2-core VM can read 0.65x
  // the median, and a node the preflight keeps out is a spare the test no longer has.
  std::string preflight = "off";
  std::string preflight_margin;  // --preflight-margin ("": the default)
  // Set: the agents are this torchrun (2.x) instead of ddprun, its c10d rendezvous hosted by host
  // 2's agent (server must be kBuiltIn); rounds and group ranks come from its INFO log.
  std::string torchrun;
  // The ddp-train torchrun's agents run: one built against torchrun's torch (`make torch2-build`;
  // LibTorch 1.13's store client cannot talk to torch 2.x's store). "": the bin dir's.
  std::string torchrun_worker;
  std::string dir;  // where the job writes (required)
  std::string run_id = "spares";
};

class SpareCluster {
 public:
  struct Node {
    int host = 0;
    std::unique_ptr<Subprocess> agent;
    size_t out_seen = 0;
  };
  // What WaitFullWorld saw.
  struct Recovery {
    double seconds = 0;      // from the fault to the first step of the full-size world
    int64_t round = 0;       // the round that runs
    int64_t recomputed = 0;  // steps done before the fault and again after it
  };

  explicit SpareCluster(SpareClusterOptions options);
  ~SpareCluster();
  SpareCluster(const SpareCluster&) = delete;
  SpareCluster& operator=(const SpareCluster&) = delete;

  // Starts the server, the members (until they train at full size) and the spares (until the
  // server counts them). "" when all that happened, else what went wrong.
  std::string Start(std::chrono::seconds limit = std::chrono::seconds(120));
  // Starts an agent on `host` (a spare once the members run): a host of the cluster's (it has
  // one more host than members and spares) or one Clear() emptied.
  void StartNode(int host);
  // Empties `host`: every process on it SIGKILLed (a frozen one too), its link up.
  void Clear(int host);

  int member_host(int i) const { return 2 + i; }  // i in [0, members)
  int spare_host(int i) const { return 2 + options_.members + i; }
  NetHosts& hosts() { return *hosts_; }
  Node& node(int host) { return nodes_[host]; }

  // The latest round the host's agent started workers in ("round R: starting" or "round R:
  // in-process recovery"), its group rank and the round's size there; -1 when none yet.
  int64_t Round(int host);
  int GroupRank(int host);
  int GroupSize(int host);
  // The member host whose agent has group rank `rank` in the latest round; 0 if none.
  int HostOfGroupRank(int rank);
  std::vector<pid_t> WorkerPids(int host) { return AgentWorkerPids(nodes_[host].agent->pid()); }
  // The highest training step printed so far (rank 0's progress lines, any host).
  int64_t HighestStep();

  void Inject(HostFault fault, int host);
  // Ends a freeze (SIGCONT) or a cut (heal); nothing for a kill.
  void Undo(HostFault fault, int host);

  // Waits until `hosts` all run the newest round at `size` nodes and a training step was
  // printed after every one of them had started it (DDP's steps are collective: a step of rank
  // 0 after that means every rank trains). nullopt after `limit` (why() says what was seen).
  std::optional<Recovery> WaitFullWorld(std::chrono::steady_clock::time_point fault_at,
                                        int64_t round_at_fault, int64_t step_at_fault,
                                        const std::vector<int>& hosts, int size,
                                        std::chrono::seconds limit);
  // Training ends: waits until every agent but those of `lost` exited; true when they all
  // exited 0. The model rank 0 saved, "" if none.
  bool WaitFinished(const std::vector<int>& lost, std::chrono::seconds limit);
  std::string Model() const;
  // `ddprun status` of the run, run on host 2 (its text; "" on failure).
  std::string Status();
  // The nodes the server knows of (members and spares), by Status(); 0 when it did not answer.
  int StatusNodes();
  // Every agent's log (stderr) with its host, for failure messages.
  std::string Logs();

 private:
  std::vector<std::string> AgentArgv(int host) const;
  std::string Endpoint() const;
  // Reads new stdout of every agent: the highest step and when it was first read.
  void ObserveSteps();

  const SpareClusterOptions options_;
  std::unique_ptr<NetHosts> hosts_;
  std::unique_ptr<RdzvDaemon> daemon_;
  std::unique_ptr<Subprocess> etcd_;
  std::vector<Node> nodes_;  // by host; [0] and [1] unused
  int64_t highest_step_ = 0;
  int64_t observe_pass_ = 0;
  int64_t step_pass_ = 0;  // the ObserveSteps pass that read the latest step line
};

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_SPARE_CLUSTER_H_
