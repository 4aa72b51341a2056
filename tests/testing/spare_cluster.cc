#include "tests/testing/spare_cluster.h"

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/test_env.h"

namespace ddprun::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr char kToken[] = "spare-cluster-token";
constexpr char kData[] = "/usr/share/datasets/fashion-mnist";
constexpr int kBuiltInPort = 29400;

// A --preload spare not yet handed a start: its stdout is ddprun's memory file. (Its
// environment in /proc stays the one it was started with, after the hand-over too.)
bool IsPreloadSpare(const std::string& pid) {
  std::error_code ec;
  const std::filesystem::path out = std::filesystem::read_symlink("/proc/" + pid + "/fd/1", ec);
  return !ec && out.string().rfind("/memfd:ddprun-spare", 0) == 0;
}

// The last match of `re` in `text`, group `group`; -1 when none.
int64_t LastMatch(const std::string& text, const std::regex& re, int group) {
  int64_t value = -1;
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
    value = std::stoll((*it)[group]);
  }
  return value;
}

// ddprun: "round R: starting N worker(s), ranks A-B of W (node G of S)" and the in-process
// "round R: in-process recovery, ...; ranks A-B of W (node G of S)". torchrun: its "has joined
// round R of the rendezvous ... as rank G in a world of size S" lines.
const std::regex& RoundLine(bool torchrun) {
  static const std::regex ddprun(
      "round (\\d+): (?:starting|in-process recovery)[^\\n]*\\(node (\\d+) of (\\d+)\\)");
  // torchrun counts restarts per agent (a new extra agent starts at 0): its rendezvous round is
  // the one number all agents share.
  static const std::regex torch(
      "has joined round (\\d+) of the rendezvous '[^']*' as rank (\\d+) in a world of size (\\d+)");
  return torchrun ? torch : ddprun;
}

}  // namespace

const char* RdzvServerName(RdzvServer server) {
  switch (server) {
    case RdzvServer::kBuiltIn:
      return "built-in";
    case RdzvServer::kRdzvDaemon:
      return "ddprun-rdzv";
    case RdzvServer::kEtcd:
      return "etcd";
  }
  return "?";
}

const char* HostFaultName(HostFault fault) {
  switch (fault) {
    case HostFault::kKill:
      return "SIGKILL (RST)";
    case HostFault::kFreeze:
      return "SIGSTOP host";
    case HostFault::kCut:
      return "link down";
  }
  return "?";
}

std::vector<pid_t> NamespacePids(const std::string& ns) {
  Subprocess p({"ip", "netns", "pids", ns});
  p.Wait(10s);
  std::vector<pid_t> out;
  for (absl::string_view s : absl::StrSplit(p.out(), '\n', absl::SkipWhitespace())) {
    out.push_back(std::atoi(std::string(s).c_str()));
  }
  return out;
}

std::vector<pid_t> AgentWorkerPids(pid_t agent) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.empty() || !std::isdigit(name[0])) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    int ppid = 0, pgrp = 0;
    rest >> state >> ppid >> pgrp;
    if (ppid == agent && pgrp != agent && !IsPreloadSpare(name)) out.push_back(std::stoi(name));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string MoveWorkersInto(pid_t agent, const TestCgroup& cgroup, std::chrono::seconds limit) {
  std::vector<pid_t> workers;
  if (!WaitUntil(
          [&] {
            workers = AgentWorkerPids(agent);
            return !workers.empty();
          },
          limit)) {
    return absl::StrCat("no worker of agent ", agent, " within ", limit.count(), " s");
  }
  for (pid_t worker : workers) {
    std::ofstream procs(cgroup.procs());
    procs << worker;
    procs.flush();
    if (!procs) return absl::StrCat("cannot move ", worker, " into ", cgroup.procs());
  }
  return "";
}

SpareCluster::SpareCluster(SpareClusterOptions options) : options_(std::move(options)) {
  const int n = 1 + options_.members + options_.spares + 1;  // room for one extra spare
  hosts_ = std::make_unique<NetHosts>(n);
  nodes_.resize(n + 1);
}

SpareCluster::~SpareCluster() {
  // Frozen processes cannot die of SIGKILL until they are woken: wake every host first.
  for (int h = 1; h <= hosts_->size(); ++h) {
    for (pid_t pid : NamespacePids(hosts_->Namespace(h))) kill(pid, SIGCONT);
  }
}

std::string SpareCluster::Endpoint() const {
  switch (options_.server) {
    case RdzvServer::kBuiltIn:  // ddprun's, or torchrun's c10d store
      return absl::StrCat(hosts_->Address(2), ":", kBuiltInPort);
    case RdzvServer::kRdzvDaemon:
      return daemon_->endpoint();
    case RdzvServer::kEtcd:
      return EtcdEndpointOn(*hosts_, 1);
  }
  return "";
}

std::vector<std::string> SpareCluster::AgentArgv(int host) const {
  const int m = options_.members;
  std::string conf = absl::StrCat("keep_alive_interval=", options_.keep_alive_interval_s,
                                  ",keep_alive_max_attempt=", options_.keep_alive_max_attempt,
                                  ",last_call_timeout=0.2,join_timeout=300");
  if (!options_.extra_rdzv_conf.empty()) absl::StrAppend(&conf, ",", options_.extra_rdzv_conf);
  const bool torchrun = !options_.torchrun.empty();
  const std::vector<std::string> train = {"--no-python",
                                          torchrun && !options_.torchrun_worker.empty()
                                              ? options_.torchrun_worker
                                              : BinPath("ddp-train"),
                                          "mnist",
                                          "--data",
                                          kData,
                                          "--no-progress-bar",
                                          "--log-interval",
                                          "1",
                                          "--batch-size",
                                          std::to_string(options_.batch_size),
                                          "--epochs",
                                          std::to_string(options_.epochs),
                                          "--max-steps",
                                          std::to_string(options_.steps_per_epoch),
                                          "--test-subset",
                                          "200",
                                          "--checkpoint-dir",
                                          options_.dir + "/ckpt",
                                          "--checkpoint-every",
                                          std::to_string(options_.checkpoint_every),
                                          "--comm-timeout",
                                          "30",
                                          "--save-model",
                                          "--save-model-path",
                                          options_.dir + "/model.pt"};
  if (torchrun) {
    std::vector<std::string> argv = {
        options_.torchrun, absl::StrCat("--nnodes=", m), "--nproc-per-node=1",
        "--rdzv-backend=c10d", "--rdzv-endpoint=" + Endpoint(), "--rdzv-id=" + options_.run_id,
        "--max-restarts=100", "--monitor-interval=0.1",
        // Host names here do not resolve to the hosts' addresses: say who hosts the store.
        host == 2 ? "--rdzv-conf=is_host=1" : "--rdzv-conf=is_host=0",
        "--local-addr=" + hosts_->Address(host)};
    argv.insert(argv.end(), train.begin(), train.end());
    return hosts_->On(host, argv);
  }
  std::vector<std::string> argv = {
      BinPath("ddprun"),
      options_.server == RdzvServer::kEtcd ? "--rdzv-backend=etcd" : "--rdzv-backend=c10d",
      "--rdzv-endpoint=" + Endpoint(),
      "--rdzv-id=" + options_.run_id,
      options_.elastic ? absl::StrCat("--nnodes=", m - 1, ":", m) : absl::StrCat("--nnodes=", m),
      "--nproc-per-node=1",
      "--max-restarts=20",
      "--rdzv-conf=" + conf,
      options_.in_process ? "--restart-mode=in-process" : "--restart-mode=cold"};
  if (options_.in_process) argv.push_back("--preload=native");
  if (options_.evict_slow) argv.push_back("--evict-slow");
  if (!options_.preflight.empty()) argv.push_back("--preflight=" + options_.preflight);
  if (!options_.preflight_margin.empty()) {
    argv.push_back("--preflight-margin=" + options_.preflight_margin);
  }
  if (host == spare_host(0) && !options_.first_spare_health_check.empty()) {
    argv.push_back("--health-check=" + options_.first_spare_health_check);
  }
  argv.insert(argv.end(), train.begin(), train.end());
  return hosts_->On(host, argv);
}

void SpareCluster::StartNode(int host) {
  nodes_[host].host = host;
  nodes_[host].out_seen = 0;
  nodes_[host].agent = std::make_unique<Subprocess>(
      AgentArgv(host),
      std::map<std::string, std::string>{
          {"DDPRUN_RDZV_TOKEN", kToken},
          {"GLOO_SOCKET_IFNAME", "eth0"},
          {"OMP_NUM_THREADS", "1"},
          {"TORCHELASTIC_ERROR_FILE", "\x01unset"},
          {"LOGLEVEL", "INFO"},
          // torchrun logs its redundancy list only at DEBUG, a level its
          // rendezvous logger gets from TORCH_LOGS alone.
          {"TORCH_LOGS", options_.torchrun.empty() ? "\x01unset" : "+distributed"}});
}

std::string SpareCluster::Start(std::chrono::seconds limit) {
  if (!hosts_->error().empty()) return "hosts: " + hosts_->error();
  if (!std::filesystem::exists(kData)) {
    return absl::StrCat(kData, " missing (apt-get install dataset-fashion-mnist)");
  }
  std::filesystem::create_directories(options_.dir);
  switch (options_.server) {
    case RdzvServer::kRdzvDaemon:
      daemon_ = RdzvDaemon::OnHost(*hosts_, 1, kToken);
      if (daemon_->endpoint().empty()) return "ddprun-rdzv: " + daemon_->error();
      break;
    case RdzvServer::kEtcd: {
      etcd_ = StartEtcdOnHost(*hosts_, 1, options_.dir + "/etcd");
      break;
    }
    case RdzvServer::kBuiltIn:
      break;
  }
  const auto deadline = Clock::now() + limit;
  auto left = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  };
  // Members one by one, so that their group ranks follow their hosts.
  for (int i = 0; i < options_.members; ++i) {
    const int host = member_host(i);
    StartNode(host);
    if (i == 0 && options_.server == RdzvServer::kBuiltIn && options_.torchrun.empty() &&
        !nodes_[host].agent->WaitForOutputContains("hosting the rendezvous", left())) {
      return "host 2's agent never hosted the rendezvous:\n" + Logs();
    }
  }
  std::vector<int> members;
  for (int i = 0; i < options_.members; ++i) members.push_back(member_host(i));
  if (!WaitFullWorld(Clock::now(), -1, 0, members, options_.members,
                     std::chrono::duration_cast<std::chrono::seconds>(left()))) {
    return "the members never trained at full size:\n" + Logs();
  }
  // Spares one by one, each counted by the server before the next (their order is theirs).
  for (int i = 0; i < options_.spares; ++i) {
    StartNode(spare_host(i));
    if (!options_.torchrun.empty()) {
      if (!nodes_[spare_host(i)].agent->WaitForOutputContains("redundancy list", left())) {
        return "torchrun's extra agent never joined the redundancy list:\n" + Logs();
      }
      continue;
    }
    if (!WaitUntil([&] { return StatusNodes() == options_.members + i + 1; }, left())) {
      return absl::StrCat("the server never counted the spare on host ", spare_host(i), ":\n",
                          Status(), Logs());
    }
  }
  return "";
}

void SpareCluster::Clear(int host) {
  // SIGKILL ends a stopped process too; the SIGCONT after it is for anything started between.
  for (int pass = 0; pass < 2; ++pass) {
    for (pid_t pid : NamespacePids(hosts_->Namespace(host))) kill(pid, SIGKILL);
  }
  for (pid_t pid : NamespacePids(hosts_->Namespace(host))) kill(pid, SIGCONT);
  hosts_->Heal(host);
  if (nodes_[host].agent != nullptr) nodes_[host].agent->Wait(10s);
}

int64_t SpareCluster::Round(int host) {
  if (nodes_[host].agent == nullptr) return -1;
  return LastMatch(nodes_[host].agent->err(), RoundLine(!options_.torchrun.empty()), 1);
}

int SpareCluster::GroupRank(int host) {
  if (nodes_[host].agent == nullptr) return -1;
  return static_cast<int>(
      LastMatch(nodes_[host].agent->err(), RoundLine(!options_.torchrun.empty()), 2));
}

int SpareCluster::GroupSize(int host) {
  if (nodes_[host].agent == nullptr) return -1;
  return static_cast<int>(
      LastMatch(nodes_[host].agent->err(), RoundLine(!options_.torchrun.empty()), 3));
}

int SpareCluster::HostOfGroupRank(int rank) {
  int64_t newest = -1;
  int found = 0;
  for (const Node& n : nodes_) {
    if (n.agent == nullptr || !n.agent->running()) continue;
    const int64_t round = Round(n.host);
    if (round >= newest && GroupRank(n.host) == rank) {
      newest = round;
      found = n.host;
    }
  }
  return found;
}

void SpareCluster::ObserveSteps() {
  static const std::regex step_re("\tstep (\\d+)");
  ++observe_pass_;
  for (Node& n : nodes_) {
    if (n.agent == nullptr) continue;
    const std::string out = n.agent->out();
    const std::string fresh = out.substr(std::min(n.out_seen, out.size()));
    n.out_seen = out.size();
    std::smatch m;
    for (std::sregex_iterator it(fresh.begin(), fresh.end(), step_re), end; it != end; ++it) {
      highest_step_ = std::max(highest_step_, static_cast<int64_t>(std::stoll((*it)[1])));
      step_pass_ = observe_pass_;
    }
  }
}

int64_t SpareCluster::HighestStep() {
  ObserveSteps();
  return highest_step_;
}

void SpareCluster::Inject(HostFault fault, int host) {
  switch (fault) {
    case HostFault::kKill:
    case HostFault::kFreeze: {
      const int sig = fault == HostFault::kKill ? SIGKILL : SIGSTOP;
      // Twice: a process started while the first list was read is caught by the second.
      for (int pass = 0; pass < 2; ++pass) {
        for (pid_t pid : NamespacePids(hosts_->Namespace(host))) kill(pid, sig);
      }
      break;
    }
    case HostFault::kCut:
      hosts_->Cut(host);
      break;
  }
}

void SpareCluster::Undo(HostFault fault, int host) {
  if (fault == HostFault::kFreeze) {
    for (pid_t pid : NamespacePids(hosts_->Namespace(host))) kill(pid, SIGCONT);
  } else if (fault == HostFault::kCut) {
    hosts_->Heal(host);
  }
}

std::optional<SpareCluster::Recovery> SpareCluster::WaitFullWorld(
    Clock::time_point fault_at, int64_t round_at_fault, int64_t step_at_fault,
    const std::vector<int>& hosts, int size, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  int64_t started_pass = -1;  // the pass that saw every host in the round
  int64_t round = -1;
  int64_t first_step = -1;
  while (Clock::now() < deadline) {
    // The round lines first: a step read in this pass may have been printed before them.
    int64_t newest = -1;
    bool all_in = true;
    for (int h : hosts) {
      const int64_t r = Round(h);
      newest = std::max(newest, r);
      if (r <= round_at_fault || GroupSize(h) != size) all_in = false;
    }
    for (int h : hosts) {
      if (Round(h) != newest) all_in = false;
    }
    if (!all_in || newest != round) started_pass = -1;
    const int64_t before = highest_step_;
    const int64_t before_pass = step_pass_;
    ObserveSteps();
    if (all_in && started_pass < 0) {
      started_pass = observe_pass_;
      round = newest;
    } else if (all_in && step_pass_ > started_pass && step_pass_ != before_pass) {
      // The lowest step of this pass's new lines is the first after the restart; the highest
      // step seen is enough to bound it from above.
      first_step = highest_step_ > before ? before + 1 : highest_step_;
      Recovery r;
      r.seconds = std::chrono::duration<double>(Clock::now() - fault_at).count();
      r.round = round;
      r.recomputed = std::max<int64_t>(0, step_at_fault - (first_step - 1));
      return r;
    }
    std::this_thread::sleep_for(20ms);
  }
  return std::nullopt;
}

bool SpareCluster::WaitFinished(const std::vector<int>& lost, std::chrono::seconds limit) {
  bool all_zero = true;
  for (Node& n : nodes_) {
    if (n.agent == nullptr || std::find(lost.begin(), lost.end(), n.host) != lost.end()) continue;
    std::optional<ExitStatus> st = n.agent->Wait(limit);
    if (!st || st->exit_code != 0) all_zero = false;
  }
  return all_zero;
}

std::string SpareCluster::Model() const { return ReadFile(options_.dir + "/model.pt"); }

std::string SpareCluster::Status() {
  std::vector<std::string> argv = {
      BinPath("ddprun"), "status", "--rdzv-id=" + options_.run_id, "--rdzv-endpoint=" + Endpoint(),
      options_.server == RdzvServer::kEtcd ? "--rdzv-backend=etcd" : "--rdzv-backend=c10d"};
  Subprocess status(hosts_->On(2, argv), {{"DDPRUN_RDZV_TOKEN", kToken}});
  std::optional<ExitStatus> st = status.Wait(20s);
  return st && st->exit_code == 0 ? status.out() : "";
}

int SpareCluster::StatusNodes() {
  static const std::regex row("(^|\n)  (node rank \\d+|waiting    |spare      )  ");
  const std::string text = Status();
  return static_cast<int>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), row), std::sregex_iterator()));
}

std::string SpareCluster::Logs() {
  std::string all;
  for (Node& n : nodes_) {
    if (n.agent == nullptr) continue;
    absl::StrAppend(&all, "--- host ", n.host, " (", hosts_->Name(n.host), ") agent:\n",
                    n.agent->err());
    // The workers' output (the agent's stdout) is too long for the message: it goes to the
    // job's folder, for the diagnosis.
    std::ofstream(absl::StrCat(options_.dir, "/host", n.host, ".out")) << n.agent->out();
    std::ofstream(absl::StrCat(options_.dir, "/host", n.host, ".err")) << n.agent->err();
  }
  if (daemon_ != nullptr) {
    std::ofstream(options_.dir + "/ddprun-rdzv.log") << daemon_->output() << daemon_->error();
  }
  return all;
}

}  // namespace ddprun::testing
