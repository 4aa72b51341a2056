// chaos-soak: ddp-train mnist on 3 namespaced hosts x 2 workers under ddprun, a ddprun-rdzv on
// a fourth, and an injector that, from a seed, keeps doing one fault at a time: SIGKILL or
// SIGSEGV a worker, SIGKILL an agent (started again, as a supervisor would), SIGSTOP/SIGCONT an
// agent, cut and heal a host's link, kill -9 and restart ddprun-rdzv, hang a rank (SIGSTOP a
// worker: --hang-timeout must find it). After each fault it waits until training runs again with
// every host in (that wait is the fault's recovery time) and --fault-interval seconds more of
// steady training, then injects the next one. The fault sequence (kinds, targets, gaps) depends
// on the seed only, so runs in cold and in-process mode (--restart-mode) meet the same faults.
//
// The soak runs in segments (one job each, its own --rdzv-id) until --faults faults or
// --seconds of injection; a job whose training ends leaves no room for more faults, so the next
// segment starts a fresh one. Every segment checks the invariants:
//   - the job exits 0 (every agent still running at its end exits 0);
//   - no process is left behind on any host (`ip netns pids` of every host is empty);
//   - no agent is stuck (they all exit within a deadline once training is over);
//   - steps recomputed per restart (the highest step printed before it minus the step training
//     resumed at) are at most --checkpoint-every;
//   - a fault that every agent recovered from in-process (their goodput ledgers say so)
//     recomputes no step, by the steps printed and by the ledgers;
//   - --fixed (--nnodes=3): the final model is bit-identical to a fault-free run of the same job.
// Prints a Markdown report (soak_report.h: faults by kind, recovery p50/p99 by kind measured
// from outside and by the agents' ledgers, the ledgers' phase split, steps recomputed, the
// effective training time ratio, peak memory), writes it as JSON with --json, and exits 0 only
// if every invariant held; 77 (ctest's "skipped") without root or Fashion-MNIST.
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
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/chaos/soak_report.h"
#include "tests/testing/net_hosts.h"
#include "tests/testing/rdzv_daemon.h"
#include "tests/testing/spare_cluster.h"
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
// Training steady this long after a fault counts as recovered (a node silent past its lease
// is given up and the round restarted up to a lease after training seemed to run on).
constexpr auto kConfirm = std::chrono::milliseconds(static_cast<int>((kLeaseS + 1.0) * 1000));

struct Options {
  int seconds = 60;  // of injection, at most
  int faults = 0;    // stop after this many (0: no limit)
  int segments = 0;  // stop after this many jobs (0: no limit)
  uint64_t seed = 1;
  bool fixed = false;  // --nnodes=3 and the bit-identical check
  int steps = 160;     // training steps per job (epochs x steps_per_epoch)
  int steps_per_epoch = 20;
  // ddp-train --checkpoint-every: steps, or "auto" (ddprun's checkpoint advice, issue 41).
  std::string checkpoint_every = "5";
  std::optional<int> FixedCheckpointEvery() const {
    int n = 0;
    if (checkpoint_every == "auto" || !absl::SimpleAtoi(checkpoint_every, &n)) return std::nullopt;
    return n;
  }
  int batch_size = 0;  // ddp-train --batch-size; 0: its default
  double mtbf_s = 0;   // --rdzv-conf mtbf= (the checkpoint advice's prior); 0: none
  int hang_timeout_s = 25;
  std::string restart_mode = "cold";    // ddprun --restart-mode
  std::string preload;                  // ddprun --preload (native: ddp-train's spares); "": off
  double gap_min_s = 2, gap_max_s = 5;  // steady training between faults
  std::string work_dir;
  std::string report;           // Markdown appended here too
  std::string json;             // the report as JSON, written here
  std::string reference_model;  // --fixed: compare with this model instead of a fault-free run
  std::string keep_reference;   // --fixed: copy the fault-free run's model here
};

// The next faults, from the seed alone: every fault draws the same number of values whatever
// happened before, so two runs of the same seed meet the same sequence.
struct PlannedFault {
  double gap_s = 0;  // steady training before it
  Kind kind = Kind::kKillWorker;
  double hold_s = 0;  // a SIGSTOP's or a cut's length
  double agent = 0;   // which agent, as a fraction of their number
  double worker = 0;  // which of its workers, likewise
};

class FaultSchedule {
 public:
  FaultSchedule(uint64_t seed, double gap_min_s, double gap_max_s, std::vector<Kind> kinds)
      : rng_(seed), gap_min_s_(gap_min_s), gap_max_s_(gap_max_s), kinds_(std::move(kinds)) {}

  PlannedFault Next() {
    PlannedFault f;
    f.gap_s = gap_min_s_ + (gap_max_s_ - gap_min_s_) * U();
    f.kind = kinds_[Pick(U(), kinds_.size())];
    // Stops and cuts are either inside the lease (nothing must restart) or well past it.
    const bool long_one = U() < 0.5;
    const double len = U();
    f.hold_s = long_one ? kLeaseS + 1.0 + 2.0 * len : 0.5 + 1.5 * len;
    f.agent = U();
    f.worker = U();
    return f;
  }

  // An index in [0, n) from a fraction in [0, 1).
  static size_t Pick(double fraction, size_t n) {
    return std::min(n - 1, static_cast<size_t>(fraction * n));
  }

 private:
  double U() { return std::uniform_real_distribution<double>(0, 1)(rng_); }

  std::mt19937_64 rng_;
  const double gap_min_s_, gap_max_s_;
  const std::vector<Kind> kinds_;  // drawn from; never empty
};

// --kinds: a comma-separated list of KindKey()s; empty: every kind.
bool ParseKinds(const std::string& text, std::vector<Kind>* kinds) {
  kinds->clear();
  if (text.empty()) {
    kinds->assign(std::begin(kKinds), std::end(kKinds));
    return true;
  }
  for (absl::string_view key : absl::StrSplit(text, ',')) {
    const Kind* k = std::find_if(std::begin(kKinds), std::end(kKinds),
                                 [&](Kind kind) { return key == KindKey(kind); });
    if (k == std::end(kKinds)) return false;
    kinds->push_back(*k);
  }
  return true;
}

// SIGINT/SIGTERM: stop injecting and tear every segment down (its processes and namespaces go
// with the destructors) instead of leaving a job running on hosts nobody will clean.
std::atomic<bool> g_interrupted{false};
void OnInterrupt(int) { g_interrupted = true; }

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One agent process on a host, and what the soak has read of its output.
struct Agent {
  int host = 0;
  std::unique_ptr<Subprocess> proc;
  size_t out_seen = 0, err_seen = 0;
  int64_t round = 0;       // the latest "round N: starting" it logged
  int64_t round_pass = 0;  // the Observe pass that read it
  bool exited = false;
};

class Segment {
 public:
  Segment(const Options& o, testing::NetHosts* hosts, const std::string& dir, int index,
          FaultSchedule* schedule)
      : o_(o), hosts_(hosts), dir_(dir), index_(index), schedule_(schedule) {}

  // Runs one job under faults until it ends or `stop_at` / `faults_left` is reached.
  bool Run(Clock::time_point stop_at, int faults_left, bool inject);
  const std::vector<FaultRecord>& faults() const { return faults_; }
  const std::vector<int64_t>& recomputed() const { return recomputed_; }
  const std::vector<std::string>& violations() const { return violations_; }
  const TrainingFigures& training() const { return training_; }
  const MemoryPeaks& memory() const { return memory_; }
  const std::optional<AdviceFigures>& advice() const { return advice_; }
  std::string ModelPath() const { return dir_ + "/model.pt"; }

 private:
  std::vector<std::string> AgentArgv(int host) const;
  void StartAgent(Agent* a);
  void StartServer(int port);
  // Reads new output of every agent: steps, rounds, resumes, exits.
  void Observe();
  // Training runs again with every host in: every agent alive in the same round and, in a new
  // round, a step read in a later pass than its start on all of them (a step read in the same
  // pass may have been printed before it); in the round of the fault, two steps past the one
  // seen at the fault (one may have been in flight: a stopped rank may already have given its
  // share of it).
  struct Mark {
    int64_t round = 0;
    int64_t step = 0;
  };
  Mark Now() {
    Observe();
    return {last_round_, max_step_};
  }
  bool Steady(const Mark& at_fault) const;
  // Waits until training is steady and stays so for kConfirm (a node lost past its lease
  // restarts the round a while after training seemed to run on): the fault's recovery time,
  // to the last time it became steady.
  std::optional<double> WaitSteady(Clock::time_point fault_at, const Mark& at_fault,
                                   std::chrono::seconds limit);
  // Watches training for `seconds` with no fault; counts the steps done as steady ones.
  void TrainSteadily(double seconds);
  FaultRecord Inject(const PlannedFault& plan);
  Agent* PlannedAgent(const PlannedFault& plan);
  std::optional<pid_t> PlannedWorker(const PlannedFault& plan, Agent** owner);
  // Every second: the peak memory of every agent and its workers.
  void SampleMemory();
  // After the job: the agents' ledgers, attributed to the faults, and their final ratios.
  void ReadAgentLedgers();
  // Every 5 s: the run's checkpoint advice as `ddprun status --json` shows it (kept: the last).
  void SampleAdvice();
  void Violation(const std::string& what) {
    std::cerr << "chaos-soak: VIOLATION: " << what << std::endl;
    violations_.push_back(what);
  }

  const Options& o_;
  testing::NetHosts* hosts_;
  const std::string dir_;
  const int index_;
  FaultSchedule* schedule_;
  std::unique_ptr<testing::RdzvDaemon> server_;
  int server_port_ = 0;
  std::vector<Agent> agents_;
  int64_t max_step_ = 0;        // the highest step printed since training last went back
  int64_t pass_ = 0;            // Observe passes
  int64_t last_step_pass_ = 0;  // the pass that read the latest step
  int64_t highest_step_ = 0;    // the highest step ever printed: the distinct steps done
  int64_t last_round_ = 0;      // the highest round any agent started
  bool finished_ = false;       // an agent exited 0: training is over
  Clock::time_point started_at_{}, finished_at_{};
  int64_t started_unix_ms_ = 0;
  Clock::time_point sampled_at_{};
  Clock::time_point advice_sampled_at_{};
  std::optional<AdviceFigures> advice_;
  TrainingFigures training_;
  MemoryPeaks memory_;
  std::vector<FaultRecord> faults_;
  std::vector<int64_t> recomputed_;
  std::vector<std::string> violations_;
};

std::vector<std::string> Segment::AgentArgv(int host) const {
  const std::string nnodes = o_.fixed ? "--nnodes=3" : "--nnodes=2:3";
  std::vector<std::string> argv = {
      testing::BinPath("ddprun"), "--rdzv-backend=c10d",
      "--rdzv-endpoint=" + hosts_->Address(1) + ":" + std::to_string(server_port_), nnodes,
      "--nproc-per-node=2", "--max-restarts=100000", "--rdzv-id=chaos" + std::to_string(index_),
      "--rdzv-conf=keep_alive_interval=0.5,keep_alive_max_attempt=6,last_call_timeout=1,"
      "read_timeout=30,join_timeout=300" +
          (o_.mtbf_s > 0 ? absl::StrCat(",mtbf=", o_.mtbf_s) : std::string()),
      "--hang-timeout=" + std::to_string(o_.hang_timeout_s), "--restart-mode=" + o_.restart_mode,
      "--preload=" + o_.preload,
      // The hosts share this machine's filesystem: every agent process writes its
      // events.jsonl (the goodput ledger) in a folder of its own under logs/.
      "--log-dir=" + dir_ + "/logs", "--no-python", testing::BinPath("ddp-train"), "mnist",
      "--data", kData, "--no-progress-bar", "--log-interval", "1", "--epochs",
      std::to_string(o_.steps / o_.steps_per_epoch), "--max-steps",
      std::to_string(o_.steps_per_epoch), "--test-subset", "500", "--checkpoint-dir",
      dir_ + "/ckpt", "--checkpoint-every", o_.checkpoint_every, "--comm-timeout", "60",
      "--save-model", "--save-model-path", dir_ + "/model.pt"};
  if (o_.batch_size > 0) argv.push_back("--batch-size=" + std::to_string(o_.batch_size));
  return hosts_->On(host, argv);
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

void Segment::SampleAdvice() {
  if (Clock::now() - advice_sampled_at_ < 5s) return;
  advice_sampled_at_ = Clock::now();
  Subprocess status(
      hosts_->On(2, {testing::BinPath("ddprun"), "status", "--json",
                     "--rdzv-endpoint=" + hosts_->Address(1) + ":" + std::to_string(server_port_),
                     "--rdzv-id=chaos" + std::to_string(index_)}),
      {{"DDPRUN_RDZV_TOKEN", kToken}});
  if (!status.Wait(10s).has_value()) return;
  if (std::optional<AdviceFigures> a = ParseAdvice(status.out())) advice_ = a;
}

void Segment::Observe() {
  static const std::regex step_re("\tstep (\\d+)");
  // A cold start, or an in-process re-forming of the survivors with their replacements.
  static const std::regex round_re("round (\\d+): (starting|in-process recovery)");
  std::smatch m;
  ++pass_;
  for (Agent& a : agents_) {
    if (a.proc == nullptr) continue;
    // The agent's own log (stderr): rounds.
    const std::string e = a.proc->err();
    std::istringstream log(e.substr(std::min(a.err_seen, e.size())));
    a.err_seen = e.size();
    for (std::string line; std::getline(log, line);) {
      if (!std::regex_search(line, m, round_re)) continue;
      a.round = std::stoll(m[1]);
      a.round_pass = pass_;
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
        if (const std::optional<int> every = o_.FixedCheckpointEvery(); every && lost > *every) {
          Violation(absl::StrCat("a restart recomputed ", lost, " steps (", max_step_,
                                 " reached, resumed at ", step - 1, "; checkpoint every ", *every,
                                 ")"));
        }
        max_step_ = step;
      }
      max_step_ = std::max(max_step_, step);
      highest_step_ = std::max(highest_step_, step);
      last_step_pass_ = pass_;
    }
    if (!a.exited && !a.proc->running()) {
      a.exited = true;
      std::optional<testing::ExitStatus> st = a.proc->Wait(1s);
      if (st && st->exit_code == 0 && !finished_) {
        finished_ = true;
        finished_at_ = Clock::now();
      }
    }
  }
  SampleMemory();
}

void Segment::SampleMemory() {
  if (Clock::now() - sampled_at_ < 1s) return;
  sampled_at_ = Clock::now();
  for (const Agent& a : agents_) {
    if (a.proc != nullptr && !a.exited)
      memory_.Sample(a.proc->pid(), testing::AgentWorkerPids(a.proc->pid()));
  }
}

void Segment::TrainSteadily(double seconds) {
  const int64_t from = highest_step_;
  const auto began = Clock::now();
  const auto until = began + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (Clock::now() < until && !finished_ && !g_interrupted) {
    Observe();
    SampleAdvice();
    std::this_thread::sleep_for(50ms);
  }
  if (finished_ || g_interrupted) return;  // a partial gap: its last steps are not steady
  training_.steady_steps += highest_step_ - from;
  training_.steady_s += Since(began);
}

void Segment::ReadAgentLedgers() {
  const std::vector<AgentLedger> ledgers = ReadLedgers(dir_ + "/logs");
  AttributeLedger(ledgers, &faults_);
  for (const AgentLedger& l : ledgers) {
    // The agents started with the job (not one started again after a fault): their ratio
    // covers the whole job.
    if (l.closed_ratio && l.first_ts_ms < started_unix_ms_ + 30000) {
      training_.agent_ratios.push_back(*l.closed_ratio);
    }
  }
  if (o_.restart_mode == "in-process") {
    for (const std::string& v : CheckInProcess(faults_)) Violation(v);
  }
}

bool Segment::Steady(const Mark& at_fault) const {
  int64_t latest_start = 0;
  for (const Agent& a : agents_) {
    if (a.exited || a.round == 0 || a.round != last_round_) return false;
    latest_start = std::max(latest_start, a.round_pass);
  }
  if (last_round_ == at_fault.round) return max_step_ >= at_fault.step + 2;
  // A new round: a step printed after it started everywhere (the old workers are gone).
  return last_step_pass_ > latest_start;
}

std::optional<double> Segment::WaitSteady(Clock::time_point fault_at, const Mark& at_fault,
                                          std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  std::optional<Clock::time_point> steady_since;
  int64_t steady_round = 0;
  while (Clock::now() < deadline) {
    Observe();
    if (finished_ || g_interrupted) {
      // Training ended while it was being confirmed: it was running again.
      if (steady_since && finished_)
        return std::chrono::duration<double>(*steady_since - fault_at).count();
      return std::nullopt;
    }
    // The supervisor: an agent that exited (fenced in a fixed world, or killed) starts again.
    for (Agent& a : agents_) {
      if (a.exited && !finished_) StartAgent(&a);
    }
    if (steady_since && (last_round_ != steady_round || !Steady(at_fault))) steady_since.reset();
    if (!steady_since && Steady(at_fault)) {
      steady_since = Clock::now();
      steady_round = last_round_;
    }
    if (steady_since && Clock::now() - *steady_since >= kConfirm) {
      return std::chrono::duration<double>(*steady_since - fault_at).count();
    }
    std::this_thread::sleep_for(50ms);
  }
  return std::nullopt;
}

Agent* Segment::PlannedAgent(const PlannedFault& plan) {
  return &agents_[FaultSchedule::Pick(plan.agent, agents_.size())];
}

std::optional<pid_t> Segment::PlannedWorker(const PlannedFault& plan, Agent** owner) {
  // A restart may be under way (a host that came back joins as a scale-up after training ran
  // again): wait for the chosen agent's next workers rather than hit nothing.
  Agent* a = PlannedAgent(plan);
  const auto deadline = Clock::now() + 5s;
  while (Clock::now() < deadline && !finished_) {
    std::vector<pid_t> workers = testing::AgentWorkerPids(a->proc->pid());
    if (!workers.empty()) {
      std::sort(workers.begin(), workers.end());
      *owner = a;
      return workers[FaultSchedule::Pick(plan.worker, workers.size())];
    }
    Observe();
    std::this_thread::sleep_for(50ms);
  }
  return std::nullopt;
}

FaultRecord Segment::Inject(const PlannedFault& plan) {
  const Kind kind = plan.kind;
  FaultRecord f;
  f.kind = kind;
  f.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  const double hold_s = plan.hold_s;
  const auto hold = std::chrono::milliseconds(static_cast<int>(hold_s * 1000));
  Agent* a = nullptr;
  switch (kind) {
    case Kind::kKillWorker:
    case Kind::kSegvWorker:
    case Kind::kHangRank: {
      std::optional<pid_t> w = PlannedWorker(plan, &a);
      if (!w) {
        f.detail = "no worker to hit";
        f.injected = false;
        return f;
      }
      const int sig = kind == Kind::kKillWorker   ? SIGKILL
                      : kind == Kind::kSegvWorker ? SIGSEGV
                                                  : SIGSTOP;
      kill(*w, sig);
      f.detail = absl::StrCat("pid ", *w, " on ", hosts_->Name(a->host));
      break;
    }
    case Kind::kKillAgent:
      a = PlannedAgent(plan);
      a->proc->SignalGroup(SIGKILL);  // its workers go with it (as with a dead node)
      a->proc->Wait(10s);
      StartAgent(a);
      f.detail = hosts_->Name(a->host);
      break;
    case Kind::kStopAgent:
      a = PlannedAgent(plan);
      a->proc->Signal(SIGSTOP);
      std::this_thread::sleep_for(hold);
      a->proc->Signal(SIGCONT);
      f.detail = absl::StrFormat("%s for %.1f s", hosts_->Name(a->host), hold_s);
      break;
    case Kind::kCutLink:
      a = PlannedAgent(plan);
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
  started_at_ = Clock::now();
  started_unix_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  if (!WaitSteady(started_at_, Mark{}, 300s)) {
    if (!finished_ && !g_interrupted) Violation("training never ran on all three hosts");
  }
  while (inject && !finished_ && !g_interrupted && Clock::now() < stop_at &&
         (faults_left <= 0 || static_cast<int>(faults_.size()) < faults_left)) {
    const PlannedFault plan = schedule_->Next();
    TrainSteadily(plan.gap_s);
    if (finished_ || g_interrupted) break;
    const Kind kind = plan.kind;
    const Mark at_fault = Now();
    const auto fault_at = Clock::now();
    const size_t restarts_before = recomputed_.size();
    FaultRecord f = Inject(plan);
    if (!f.injected) {
      std::cout << absl::StrFormat("segment %d: %s skipped (%s)\n", index_, KindName(kind),
                                   f.detail)
                << std::flush;
      continue;
    }
    std::optional<double> recovery =
        WaitSteady(fault_at, at_fault, std::chrono::seconds(o_.hang_timeout_s + 120));
    for (size_t i = restarts_before; i < recomputed_.size(); ++i) f.recomputed += recomputed_[i];
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
  training_.steps = highest_step_;
  training_.wall_s =
      std::chrono::duration<double>((finished_ ? finished_at_ : Clock::now()) - started_at_)
          .count();
  ReadAgentLedgers();
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
    std::vector<pid_t> left;
    const auto until = Clock::now() + 5s;
    do {
      left = testing::NamespacePids(hosts_->Namespace(host));
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

// "MIN:MAX" seconds.
bool ParseInterval(const std::string& text, double* min_s, double* max_s) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  return parts.size() == 2 && absl::SimpleAtod(parts[0], min_s) &&
         absl::SimpleAtod(parts[1], max_s) && *min_s >= 0 && *max_s >= *min_s;
}

// The fault-free run of --fixed: its final model, or the one given.
std::optional<std::string> ReferenceModel(const Options& o, testing::NetHosts* hosts,
                                          FaultSchedule* schedule, SoakResult* result) {
  if (!o.reference_model.empty()) {
    std::string model = testing::ReadFile(o.reference_model);
    if (model.empty()) result->violations.push_back(o.reference_model + ": no model there");
    return model;
  }
  Segment ref(o, hosts, o.work_dir + "/reference", 0, schedule);
  if (!ref.Run(Clock::now(), 0, /*inject=*/false)) {
    for (const auto& v : ref.violations()) result->violations.push_back("fault-free run: " + v);
  }
  std::cout << absl::StrFormat("fault-free run: %d steps in %.1f s\n", ref.training().steps,
                               ref.training().wall_s)
            << std::flush;
  if (!o.keep_reference.empty()) {
    std::filesystem::copy_file(ref.ModelPath(), o.keep_reference,
                               std::filesystem::copy_options::overwrite_existing);
  }
  return testing::ReadFile(ref.ModelPath());
}

// Segments until the faults or the time run out (or an invariant breaks).
void RunSegments(const Options& o, testing::NetHosts* hosts, FaultSchedule* schedule,
                 const std::optional<std::string>& reference_model, SoakResult* result) {
  const auto stop = Clock::now() + std::chrono::seconds(o.seconds);
  const auto faults_left = [&] {
    return o.faults > 0 ? o.faults - static_cast<int>(result->faults.size()) : 0;
  };
  while (result->violations.empty() && Clock::now() < stop &&
         (o.faults <= 0 || faults_left() > 0) &&
         (o.segments <= 0 || result->segments < o.segments)) {
    const int index = ++result->segments;
    Segment s(o, hosts, o.work_dir + "/segment" + std::to_string(index), index, schedule);
    const bool ok = s.Run(stop, faults_left(), /*inject=*/true);
    result->faults.insert(result->faults.end(), s.faults().begin(), s.faults().end());
    result->recomputed.insert(result->recomputed.end(), s.recomputed().begin(),
                              s.recomputed().end());
    result->training.Add(s.training());
    result->memory.Merge(s.memory());
    if (s.advice().has_value()) result->advice = s.advice();
    for (const auto& v : s.violations()) result->violations.push_back(v);
    if (ok && reference_model) {
      const std::string model = testing::ReadFile(s.ModelPath());
      if (model.empty() || model != *reference_model) {
        result->violations.push_back(
            absl::StrCat("segment ", index, ": the final model differs from the fault-free run's"));
      } else {
        result->identical = "final models bit-identical to the fault-free run";
      }
    }
  }
}

int Main(int argc, char** argv) {
  Options o;
  std::string interval = "2:5";
  CLI::App app("chaos-soak: faults injected into a ddprun job on namespaced hosts");
  app.add_option("--seconds", o.seconds, "seconds of fault injection, at most");
  app.add_option("--faults", o.faults, "stop after this many faults (0: no limit)");
  app.add_option("--seed", o.seed, "seed of the fault sequence");
  app.add_flag("--fixed", o.fixed, "--nnodes=3 and a bit-identical check against a fault-free run");
  app.add_option("--segments", o.segments, "stop after this many jobs (0: no limit)");
  app.add_option("--steps", o.steps, "training steps per job");
  app.add_option("--steps-per-epoch", o.steps_per_epoch,
                 "training steps per epoch (each epoch ends with a test)");
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "steps between checkpoints, or auto (ddprun's checkpoint advice)")
      ->check([](const std::string& v) {
        int n = 0;
        return v == "auto" || (absl::SimpleAtoi(v, &n) && n > 0)
                   ? std::string()
                   : std::string("a positive number of steps, or auto");
      });
  app.add_option("--batch-size", o.batch_size, "ddp-train --batch-size per worker (default: its)");
  app.add_option("--mtbf", o.mtbf_s, "--rdzv-conf mtbf= seconds (the advice's prior; 0: none)");
  app.add_option("--hang-timeout", o.hang_timeout_s, "ddprun --hang-timeout, seconds");
  app.add_option("--restart-mode", o.restart_mode, "ddprun --restart-mode")
      ->check(CLI::IsMember({"cold", "in-process"}));
  app.add_option("--preload", o.preload, "ddprun --preload: native (spare ddp-trains) or off")
      ->check(CLI::IsMember({"", "native"}));
  std::string kinds;
  app.add_option("--kinds", kinds,
                 "only these faults, comma-separated: kill_worker, segv_worker, kill_agent, "
                 "stop_agent, cut_link, restart_server, hang_rank (default: all)");
  app.add_option("--fault-interval", interval,
                 "MIN:MAX seconds of steady training between faults (default 2:5)");
  app.add_option("--work-dir", o.work_dir, "where jobs write (default: a new temporary one)");
  app.add_option("--report", o.report, "append the Markdown report to this file");
  app.add_option("--json", o.json, "write the report as JSON to this file");
  app.add_option("--reference-model", o.reference_model,
                 "--fixed: compare with this model instead of running a fault-free job");
  app.add_option("--keep-reference", o.keep_reference,
                 "--fixed: copy the fault-free job's model here (for --reference-model)");
  CLI11_PARSE(app, argc, argv);
  if (!ParseInterval(interval, &o.gap_min_s, &o.gap_max_s)) {
    std::cerr << "chaos-soak: --fault-interval wants MIN:MAX seconds, not " << interval
              << std::endl;
    return 2;
  }
  std::vector<Kind> fault_kinds;
  if (!ParseKinds(kinds, &fault_kinds)) {
    std::cerr << "chaos-soak: --kinds=" << kinds << ": unknown fault kind (see --help)"
              << std::endl;
    return 2;
  }
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
  FaultSchedule schedule(o.seed, o.gap_min_s, o.gap_max_s, std::move(fault_kinds));
  SoakResult result;
  result.restart_mode = o.restart_mode;
  result.preload = o.preload;
  result.fixed = o.fixed;
  result.seed = o.seed;
  result.gap_min_s = o.gap_min_s;
  result.gap_max_s = o.gap_max_s;
  result.checkpoint_every = o.checkpoint_every;
  std::optional<std::string> reference_model;
  if (o.fixed) reference_model = ReferenceModel(o, &hosts, &schedule, &result);
  // The fault-free run's time is not the soak's: the injection time starts after it.
  const auto injecting = Clock::now();
  RunSegments(o, &hosts, &schedule, reference_model, &result);
  result.wall_s = Since(injecting);
  const std::string report = MarkdownReport(result);
  std::cout << "\n" << report;
  if (!o.report.empty()) std::ofstream(o.report, std::ios::app) << report << "\n";
  if (!o.json.empty()) std::ofstream(o.json) << JsonReport(result) << "\n";
  return result.violations.empty() && !result.faults.empty() ? 0 : 1;
}

}  // namespace
}  // namespace ddprun::chaos

int main(int argc, char** argv) { return ddprun::chaos::Main(argc, argv); }
