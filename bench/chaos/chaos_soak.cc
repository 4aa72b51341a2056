// chaos-soak: ddp-train mnist on 3 namespaced hosts x 2 workers under ddprun, a ddprun-rdzv on
// a fourth, and an injector that, from a seed, keeps doing one fault at a time: SIGKILL or
// SIGSEGV a worker, SIGKILL an agent (started again, as a supervisor would), SIGSTOP/SIGCONT an
// agent, cut and heal a host's link, kill -9 and restart ddprun-rdzv, hang a rank (SIGSTOP a
// worker: --hang-timeout must find it). After each fault it waits until training runs again with
// every host in (that wait is the fault's recovery time) and a few seconds more, then injects
// the next one.
//
// The soak runs in segments (one job each, its own --rdzv-id) until --faults faults or
// --seconds of injection; a job whose training ends leaves no room for more faults, so the next
// segment starts a fresh one. Every segment checks the invariants:
//   - the job exits 0 (every agent still running at its end exits 0);
//   - no process is left behind on any host (`ip netns pids` of every host is empty);
//   - no agent is stuck (they all exit within a deadline once training is over);
//   - steps recomputed per restart (the highest step printed before it minus the step training
//     resumed at) are at most --checkpoint-every;
//   - --fixed (--nnodes=3): the final model is bit-identical to a fault-free run of the same job.
// Prints a Markdown report (faults by kind, recovery p50/p99 by kind, steps recomputed) and
// exits 0 only if every invariant held; 77 (ctest's "skipped") without root or Fashion-MNIST.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/testing/net_hosts.h"
#include "tests/testing/rdzv_daemon.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun::chaos {
namespace {

using Clock = std::chrono::steady_clock;
using testing::Subprocess;
using namespace std::chrono_literals;

constexpr char kToken[] = "chaos-soak-token";
constexpr char kData[] = "/usr/share/datasets/fashion-mnist";
constexpr int kAgentHosts[] = {2, 3, 4};  // host 1 runs ddprun-rdzv
constexpr double kLeaseS = 3.0;           // keep_alive_interval 0.5 s x 6

struct Options {
  int seconds = 60;  // of injection, at most
  int faults = 0;    // stop after this many (0: no limit)
  uint64_t seed = 1;
  bool fixed = false;  // --nnodes=3 and the bit-identical check
  int steps = 160;     // training steps per job (epochs x steps_per_epoch)
  int steps_per_epoch = 20;
  int checkpoint_every = 5;
  int hang_timeout_s = 25;
  std::string work_dir;
  std::string report;  // Markdown appended here too
};

enum class Kind {
  kKillWorker,
  kSegvWorker,
  kKillAgent,
  kStopAgent,
  kCutLink,
  kRestartServer,
  kHangRank
};
constexpr Kind kKinds[] = {Kind::kKillWorker, Kind::kSegvWorker, Kind::kKillAgent,
                           Kind::kStopAgent,  Kind::kCutLink,    Kind::kRestartServer,
                           Kind::kHangRank};

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kKillWorker:
      return "SIGKILL a worker";
    case Kind::kSegvWorker:
      return "SIGSEGV a worker";
    case Kind::kKillAgent:
      return "SIGKILL an agent, start it again";
    case Kind::kStopAgent:
      return "SIGSTOP/SIGCONT an agent";
    case Kind::kCutLink:
      return "cut and heal a link";
    case Kind::kRestartServer:
      return "kill -9 and restart ddprun-rdzv";
    case Kind::kHangRank:
      return "hang a rank (SIGSTOP a worker)";
  }
  return "?";
}

// SIGINT/SIGTERM: stop injecting and tear every segment down (its processes and namespaces go
// with the destructors) instead of leaving a job running on hosts nobody will clean.
std::atomic<bool> g_interrupted{false};
void OnInterrupt(int) { g_interrupted = true; }

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The agent's workers: its children that lead process groups of their own (the agent's own
// helper processes stay in its group).
std::vector<pid_t> Workers(pid_t pid) {
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
    if (ppid == pid && pgrp != pid) out.push_back(std::stoi(name));
  }
  return out;
}

// Pids in a host's network namespace (anything left behind shows here).
std::vector<std::string> NamespacePids(const std::string& ns) {
  Subprocess p({"ip", "netns", "pids", ns});
  p.Wait(10s);
  std::vector<std::string> out;
  for (absl::string_view s : absl::StrSplit(p.out(), '\n', absl::SkipWhitespace())) {
    out.emplace_back(s);
  }
  return out;
}

// One agent process on a host, and what the soak has read of its output.
struct Agent {
  int host = 0;
  std::unique_ptr<Subprocess> proc;
  size_t out_seen = 0, err_seen = 0;
  int64_t round = 0;  // the latest "round N: starting" it logged
  Clock::time_point round_at{};
  bool exited = false;
};

struct FaultRecord {
  Kind kind;
  std::string detail;
  double recovery_s = -1;  // fault -> training running again with every host in
  bool injected = true;    // false: nothing to hit (no worker alive for 5 s); not counted
};

class Segment {
 public:
  Segment(const Options& o, testing::NetHosts* hosts, const std::string& dir, int index,
          std::mt19937_64* rng)
      : o_(o), hosts_(hosts), dir_(dir), index_(index), rng_(rng) {}

  // Runs one job under faults until it ends or `stop_at` / `faults_left` is reached.
  bool Run(Clock::time_point stop_at, int faults_left, bool inject);
  const std::vector<FaultRecord>& faults() const { return faults_; }
  const std::vector<int64_t>& recomputed() const { return recomputed_; }
  const std::vector<std::string>& violations() const { return violations_; }
  std::string ModelPath() const { return dir_ + "/model.pt"; }

 private:
  std::vector<std::string> AgentArgv(int host) const;
  void StartAgent(Agent* a);
  void StartServer(int port);
  // Reads new output of every agent: steps, rounds, resumes, exits.
  void Observe();
  // Training runs again with every host in: every agent alive in the same round and, in a new
  // round, a step after it started on all of them; in the round of the fault, two steps past
  // the one seen at the fault (one may have been in flight: a stopped rank may already have
  // given its share of it).
  struct Mark {
    int64_t round = 0;
    int64_t step = 0;
  };
  Mark Now() {
    Observe();
    return {last_round_, max_step_};
  }
  bool Steady(const Mark& at_fault) const;
  std::optional<double> WaitSteady(Clock::time_point fault_at, const Mark& at_fault,
                                   std::chrono::seconds limit);
  FaultRecord Inject(Kind kind);
  Agent* RandomAgent();
  std::optional<pid_t> RandomWorker(Agent** owner);
  void Violation(const std::string& what) {
    std::cerr << "chaos-soak: VIOLATION: " << what << std::endl;
    violations_.push_back(what);
  }

  const Options& o_;
  testing::NetHosts* hosts_;
  const std::string dir_;
  const int index_;
  std::mt19937_64* rng_;
  std::unique_ptr<testing::RdzvDaemon> server_;
  int server_port_ = 0;
  std::vector<Agent> agents_;
  int64_t max_step_ = 0;  // the highest step printed since training last went back
  Clock::time_point last_step_at_{};
  int64_t last_round_ = 0;  // the highest round any agent started
  bool finished_ = false;   // an agent exited 0: training is over
  std::vector<FaultRecord> faults_;
  std::vector<int64_t> recomputed_;
  std::vector<std::string> violations_;
};

std::vector<std::string> Segment::AgentArgv(int host) const {
  const std::string nnodes = o_.fixed ? "--nnodes=3" : "--nnodes=2:3";
  return hosts_->On(
      host, {testing::BinPath("ddprun"),
             "--rdzv-backend=c10d",
             "--rdzv-endpoint=" + hosts_->Address(1) + ":" + std::to_string(server_port_),
             nnodes,
             "--nproc-per-node=2",
             "--max-restarts=100000",
             "--rdzv-id=chaos" + std::to_string(index_),
             "--rdzv-conf=keep_alive_interval=0.5,keep_alive_max_attempt=6,last_call_timeout=1,"
             "read_timeout=30,join_timeout=300",
             "--hang-timeout=" + std::to_string(o_.hang_timeout_s),
             "--log-dir=" + dir_ + "/logs",
             "--no-python",
             testing::BinPath("ddp-train"),
             "mnist",
             "--data",
             kData,
             "--no-progress-bar",
             "--log-interval",
             "1",
             "--epochs",
             std::to_string(o_.steps / o_.steps_per_epoch),
             "--max-steps",
             std::to_string(o_.steps_per_epoch),
             "--test-subset",
             "500",
             "--checkpoint-dir",
             dir_ + "/ckpt",
             "--checkpoint-every",
             std::to_string(o_.checkpoint_every),
             "--comm-timeout",
             "60",
             "--save-model",
             "--save-model-path",
             dir_ + "/model.pt"});
}

void Segment::StartAgent(Agent* a) {
  a->proc = std::make_unique<Subprocess>(
      AgentArgv(a->host),
      std::map<std::string, std::string>{{"DDPRUN_RDZV_TOKEN", kToken},
                                         {"GLOO_SOCKET_IFNAME", "eth0"},
                                         {"OMP_NUM_THREADS", "1"},
                                         {"TORCHELASTIC_ERROR_FILE", "\x01unset"}});
  a->out_seen = a->err_seen = 0;
  a->round = 0;
  a->exited = false;
}

void Segment::StartServer(int port) {
  server_ = testing::RdzvDaemon::OnHost(*hosts_, 1, kToken, port);
  server_port_ = server_->port();
}

void Segment::Observe() {
  static const std::regex step_re("\tstep (\\d+)");
  static const std::regex round_re("round (\\d+): starting");
  std::smatch m;
  for (Agent& a : agents_) {
    if (a.proc == nullptr) continue;
    // The agent's own log (stderr): rounds.
    const std::string e = a.proc->err();
    std::istringstream log(e.substr(std::min(a.err_seen, e.size())));
    a.err_seen = e.size();
    for (std::string line; std::getline(log, line);) {
      if (!std::regex_search(line, m, round_re)) continue;
      a.round = std::stoll(m[1]);
      a.round_at = Clock::now();
      last_round_ = std::max(last_round_, a.round);
    }
    // The workers' progress lines (stdout): the global step. Training resumed from a
    // checkpoint prints a step below the highest seen: the difference was recomputed.
    const std::string o = a.proc->out();
    std::istringstream progress(o.substr(std::min(a.out_seen, o.size())));
    a.out_seen = o.size();
    for (std::string line; std::getline(progress, line);) {
      if (!std::regex_search(line, m, step_re)) continue;
      const int64_t step = std::stoll(m[1]);
      if (step < max_step_) {
        const int64_t lost = max_step_ - (step - 1);
        recomputed_.push_back(lost);
        if (lost > o_.checkpoint_every) {
          Violation(absl::StrCat("a restart recomputed ", lost, " steps (", max_step_,
                                 " reached, resumed at ", step - 1, "; checkpoint every ",
                                 o_.checkpoint_every, ")"));
        }
        max_step_ = step;
      }
      max_step_ = std::max(max_step_, step);
      last_step_at_ = Clock::now();
    }
    if (!a.exited && !a.proc->running()) {
      a.exited = true;
      std::optional<testing::ExitStatus> st = a.proc->Wait(1s);
      if (st && st->exit_code == 0) finished_ = true;
    }
  }
}

bool Segment::Steady(const Mark& at_fault) const {
  Clock::time_point latest_start{};
  for (const Agent& a : agents_) {
    if (a.exited || a.round == 0 || a.round != last_round_) return false;
    latest_start = std::max(latest_start, a.round_at);
  }
  if (last_round_ == at_fault.round) return max_step_ >= at_fault.step + 2;
  // A new round: a step printed after it started everywhere (the old workers are gone).
  return last_step_at_ > latest_start;
}

std::optional<double> Segment::WaitSteady(Clock::time_point fault_at, const Mark& at_fault,
                                          std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    Observe();
    if (finished_ || g_interrupted) return std::nullopt;
    // The supervisor: an agent that exited (fenced in a fixed world, or killed) starts again.
    for (Agent& a : agents_) {
      if (a.exited && !finished_) StartAgent(&a);
    }
    if (Steady(at_fault)) return Since(fault_at);
    std::this_thread::sleep_for(50ms);
  }
  return std::nullopt;
}

Agent* Segment::RandomAgent() {
  return &agents_[std::uniform_int_distribution<int>(0, agents_.size() - 1)(*rng_)];
}

std::optional<pid_t> Segment::RandomWorker(Agent** owner) {
  // A restart may be under way (a host that came back joins as a scale-up after training ran
  // again): wait for the chosen agent's next workers rather than hit nothing.
  Agent* a = RandomAgent();
  const auto deadline = Clock::now() + 5s;
  while (Clock::now() < deadline && !finished_) {
    std::vector<pid_t> workers = Workers(a->proc->pid());
    if (!workers.empty()) {
      *owner = a;
      return workers[std::uniform_int_distribution<size_t>(0, workers.size() - 1)(*rng_)];
    }
    Observe();
    std::this_thread::sleep_for(50ms);
  }
  return std::nullopt;
}

FaultRecord Segment::Inject(Kind kind) {
  FaultRecord f{kind, "", -1};
  std::uniform_real_distribution<double> u(0, 1);
  // Stops and cuts are either inside the lease (nothing must restart) or well past it.
  const bool long_one = u(*rng_) < 0.5;
  const double hold_s = long_one ? kLeaseS + 1.0 + 2.0 * u(*rng_) : 0.5 + 1.5 * u(*rng_);
  const auto hold = std::chrono::milliseconds(static_cast<int>(hold_s * 1000));
  Agent* a = nullptr;
  switch (kind) {
    case Kind::kKillWorker:
    case Kind::kSegvWorker:
    case Kind::kHangRank: {
      std::optional<pid_t> w = RandomWorker(&a);
      if (!w) return {kind, "no worker to hit", -1, false};
      const int sig = kind == Kind::kKillWorker   ? SIGKILL
                      : kind == Kind::kSegvWorker ? SIGSEGV
                                                  : SIGSTOP;
      kill(*w, sig);
      f.detail = absl::StrCat("pid ", *w, " on ", hosts_->Name(a->host));
      break;
    }
    case Kind::kKillAgent:
      a = RandomAgent();
      a->proc->SignalGroup(SIGKILL);  // its workers go with it (as with a dead node)
      a->proc->Wait(10s);
      StartAgent(a);
      f.detail = hosts_->Name(a->host);
      break;
    case Kind::kStopAgent:
      a = RandomAgent();
      a->proc->Signal(SIGSTOP);
      std::this_thread::sleep_for(hold);
      a->proc->Signal(SIGCONT);
      f.detail = absl::StrFormat("%s for %.1f s", hosts_->Name(a->host), hold_s);
      break;
    case Kind::kCutLink:
      a = RandomAgent();
      hosts_->Cut(a->host);
      std::this_thread::sleep_for(hold);
      hosts_->Heal(a->host);
      f.detail = absl::StrFormat("%s for %.1f s", hosts_->Name(a->host), hold_s);
      break;
    case Kind::kRestartServer:
      server_->Kill();
      std::this_thread::sleep_for(500ms);
      StartServer(server_port_);
      f.detail = absl::StrCat("port ", server_port_);
      break;
  }
  return f;
}

bool Segment::Run(Clock::time_point stop_at, int faults_left, bool inject) {
  std::filesystem::create_directories(dir_);
  StartServer(0);
  if (server_port_ == 0) {
    Violation("ddprun-rdzv did not start: " + server_->error());
    return false;
  }
  for (int host : kAgentHosts) {
    agents_.push_back(Agent{host});
    StartAgent(&agents_.back());
  }
  const auto start = Clock::now();
  if (!WaitSteady(start, Mark{}, 300s)) {
    if (!finished_ && !g_interrupted) Violation("training never ran on all three hosts");
  }
  std::uniform_real_distribution<double> gap(2.0, 5.0);
  while (inject && !finished_ && !g_interrupted && Clock::now() < stop_at &&
         (faults_left <= 0 || static_cast<int>(faults_.size()) < faults_left)) {
    // A few seconds of steady training between faults.
    const auto until =
        Clock::now() + std::chrono::milliseconds(static_cast<int>(gap(*rng_) * 1000));
    while (Clock::now() < until && !finished_ && !g_interrupted) {
      Observe();
      std::this_thread::sleep_for(50ms);
    }
    if (finished_ || g_interrupted) break;
    const Kind kind = kKinds[std::uniform_int_distribution<int>(0, std::size(kKinds) - 1)(*rng_)];
    const Mark at_fault = Now();
    const auto fault_at = Clock::now();
    FaultRecord f = Inject(kind);
    if (!f.injected) {
      std::cout << absl::StrFormat("segment %d: %s skipped (%s)\n", index_, KindName(kind),
                                   f.detail)
                << std::flush;
      continue;
    }
    std::optional<double> recovery =
        WaitSteady(fault_at, at_fault, std::chrono::seconds(o_.hang_timeout_s + 120));
    if (recovery) {
      f.recovery_s = *recovery;
    } else if (!finished_ && !g_interrupted) {
      Violation(absl::StrCat("no recovery within ", o_.hang_timeout_s + 120, " s after ",
                             KindName(kind), " (", f.detail, ")"));
      faults_.push_back(f);
      break;
    }
    std::cout << absl::StrFormat("segment %d fault %d: %s (%s): recovered in %.2f s\n", index_,
                                 faults_.size() + 1, KindName(kind), f.detail, f.recovery_s)
              << std::flush;
    faults_.push_back(f);
  }
  if (g_interrupted) {
    Violation("interrupted (SIGINT/SIGTERM): the job was killed, not checked");
    return false;
  }
  // The end: training finishes by itself; every agent must exit 0 within the deadline.
  const auto end_deadline = Clock::now() + 600s;
  bool all_exited = false;
  while (Clock::now() < end_deadline) {
    Observe();
    for (Agent& a : agents_) {
      if (a.exited && !finished_) StartAgent(&a);
    }
    all_exited =
        std::all_of(agents_.begin(), agents_.end(), [](const Agent& a) { return a.exited; });
    if (all_exited) break;
    std::this_thread::sleep_for(100ms);
  }
  if (!all_exited) Violation("an agent was still running 600 s after the end of injection");
  for (Agent& a : agents_) {
    std::optional<testing::ExitStatus> st = a.proc->Wait(5s);
    if (!st || st->exit_code != 0) {
      Violation(absl::StrCat(
          "agent on ", hosts_->Name(a.host), " exited ",
          st ? std::to_string(st->exit_code) : "never", ": ",
          a.proc->err().substr(a.proc->err().size() > 2000 ? a.proc->err().size() - 2000 : 0)));
    }
  }
  server_->Kill();
  for (int host = 1; host <= hosts_->size(); ++host) {
    // Processes exit asynchronously after their parent reaped them: a short grace.
    std::vector<std::string> left;
    const auto until = Clock::now() + 5s;
    do {
      left = NamespacePids(absl::StrCat(hosts_->Namespace(host)));
      if (left.empty()) break;
      std::this_thread::sleep_for(100ms);
    } while (Clock::now() < until);
    if (!left.empty()) {
      Violation(absl::StrCat("processes left behind on ", hosts_->Name(host), ": ",
                             absl::StrJoin(left, " ")));
    }
  }
  return violations_.empty();
}

std::string Percentile(std::vector<double> v, double p) {
  if (v.empty()) return "-";
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return absl::StrFormat("%.2f", v[i]);
}

std::string Report(const Options& o, const std::vector<FaultRecord>& faults,
                   const std::vector<int64_t>& recomputed, int segments, double wall_s,
                   const std::vector<std::string>& violations, const std::string& identical) {
  std::string out =
      absl::StrFormat("Chaos soak: %s, seed %d, %d segment(s), %d faults, %.0f s wall. ",
                      o.fixed ? "fixed world (--nnodes=3)" : "elastic (--nnodes=2:3)", o.seed,
                      segments, faults.size(), wall_s);
  absl::StrAppend(&out,
                  violations.empty() ? "Every invariant held"
                                     : absl::StrCat(violations.size(), " violation(s)"),
                  identical.empty() ? "" : absl::StrCat("; ", identical), ".\n\n");
  absl::StrAppend(&out, "| fault | count | recovery p50 s | recovery p99 s |\n|---|---|---|---|\n");
  for (Kind k : kKinds) {
    std::vector<double> rec;
    int n = 0;
    for (const FaultRecord& f : faults) {
      if (f.kind != k) continue;
      ++n;
      if (f.recovery_s >= 0) rec.push_back(f.recovery_s);
    }
    absl::StrAppend(&out, "| ", KindName(k), " | ", n, " | ", Percentile(rec, 0.5), " | ",
                    Percentile(rec, 0.99), " |\n");
  }
  int64_t total = 0, worst = 0;
  for (int64_t r : recomputed) {
    total += r;
    worst = std::max(worst, r);
  }
  absl::StrAppend(&out, "\nSteps recomputed: ", total, " in all; ", recomputed.size(),
                  " restart(s) went back to a checkpoint, at most ", worst,
                  " steps for one (checkpoint every ", o.checkpoint_every, " steps).\n");
  for (const std::string& v : violations) absl::StrAppend(&out, "- VIOLATION: ", v, "\n");
  return out;
}

int Main(int argc, char** argv) {
  Options o;
  CLI::App app("chaos-soak: faults injected into a ddprun job on namespaced hosts");
  app.add_option("--seconds", o.seconds, "seconds of fault injection, at most");
  app.add_option("--faults", o.faults, "stop after this many faults (0: no limit)");
  app.add_option("--seed", o.seed, "seed of the fault sequence");
  app.add_flag("--fixed", o.fixed, "--nnodes=3 and a bit-identical check against a fault-free run");
  app.add_option("--steps", o.steps, "training steps per job");
  app.add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints");
  app.add_option("--hang-timeout", o.hang_timeout_s, "ddprun --hang-timeout, seconds");
  app.add_option("--work-dir", o.work_dir, "where jobs write (default: a new temporary one)");
  app.add_option("--report", o.report, "append the Markdown report to this file");
  CLI11_PARSE(app, argc, argv);
  if (const std::string why = testing::NetHosts::Unavailable(); !why.empty()) {
    std::cout << "chaos-soak: SKIPPED: " << why << std::endl;
    return 77;
  }
  if (!std::filesystem::exists(kData)) {
    std::cout << "chaos-soak: SKIPPED: " << kData << " missing" << std::endl;
    return 77;
  }
  std::unique_ptr<testing::TempDir> temp;
  if (o.work_dir.empty()) {
    temp = std::make_unique<testing::TempDir>();
    o.work_dir = temp->path();
  }
  signal(SIGINT, OnInterrupt);
  signal(SIGTERM, OnInterrupt);
  testing::NetHosts hosts(4);
  if (!hosts.error().empty()) {
    std::cerr << "chaos-soak: hosts: " << hosts.error() << std::endl;
    return 1;
  }
  std::mt19937_64 rng(o.seed);
  const auto start = Clock::now();
  const auto stop_at = start + std::chrono::seconds(o.seconds);
  std::vector<FaultRecord> faults;
  std::vector<int64_t> recomputed;
  std::vector<std::string> violations;
  std::string identical;
  std::optional<std::string> reference_model;
  if (o.fixed) {
    Segment ref(o, &hosts, o.work_dir + "/reference", 0, &rng);
    if (!ref.Run(start, 0, /*inject=*/false)) {
      for (const auto& v : ref.violations()) violations.push_back("fault-free run: " + v);
    }
    reference_model = testing::ReadFile(ref.ModelPath());
  }
  int segments = 0;
  const auto injecting = Clock::now();
  const auto stop = o.fixed ? injecting + std::chrono::seconds(o.seconds) : stop_at;
  while (violations.empty() && Clock::now() < stop &&
         (o.faults <= 0 || static_cast<int>(faults.size()) < o.faults)) {
    ++segments;
    Segment s(o, &hosts, o.work_dir + "/segment" + std::to_string(segments), segments, &rng);
    const bool ok = s.Run(stop, o.faults > 0 ? o.faults - static_cast<int>(faults.size()) : 0,
                          /*inject=*/true);
    faults.insert(faults.end(), s.faults().begin(), s.faults().end());
    recomputed.insert(recomputed.end(), s.recomputed().begin(), s.recomputed().end());
    for (const auto& v : s.violations()) violations.push_back(v);
    if (ok && reference_model) {
      const std::string model = testing::ReadFile(s.ModelPath());
      if (model.empty() || model != *reference_model) {
        violations.push_back(absl::StrCat("segment ", segments,
                                          ": the final model differs from the fault-free run's"));
      } else {
        identical = "final models bit-identical to the fault-free run";
      }
    }
  }
  const std::string report =
      Report(o, faults, recomputed, segments, Since(start), violations, identical);
  std::cout << "\n" << report;
  if (!o.report.empty()) {
    std::ofstream(o.report, std::ios::app) << report << "\n";
  }
  return violations.empty() && !faults.empty() ? 0 : 1;
}

}  // namespace
}  // namespace ddprun::chaos

int main(int argc, char** argv) { return ddprun::chaos::Main(argc, argv); }
