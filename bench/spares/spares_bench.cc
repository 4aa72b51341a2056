// spares-bench: what a lost node costs with a spare ready, without one, and under torchrun 2.11
// (issue 40, point 3). ddp-train mnist (Fashion-MNIST) on namespaced hosts
// (tests/testing/spare_cluster.h): three members in a fixed world (--nnodes=3, one worker each)
// and one extra host, ddprun-rdzv on host 1. One job per (restart mode, fault, variant):
//   spare    the extra host runs an agent from the start: a spare, ready;
//   no-spare today's behaviour without one: the extra host's agent is started at the fault (a
//            scheduler that replaces the node at once), so the world waits for its start;
//   torchrun torchrun 2.11 on the same four hosts (its c10d rendezvous hosted by host 2's
//            agent), the extra agent started with the others; its workers are a ddp-train
//            built against torch 2.11 (--torchrun-worker), its model compared with a fault-free
//            torchrun run's.
// --faults times per job: steady training, then the member of group rank 1 is lost (kill: every
// process on its host SIGKILLed; freeze: SIGSTOP of every process; cut: its link down), and the
// time is taken from the fault to a training step printed after every node of the new
// full-size world started its round (steps are collective: every rank trains again); steps
// recomputed are the highest step before the fault minus the step training resumed from. The
// lost host is then emptied and becomes the extra host (spare: its agent started again as the
// next spare). At the end the final model must be byte-identical to a fault-free run's.
// Prints a Markdown table (p50 / worst recovery, steps recomputed, model identical) per job.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tests/testing/spare_cluster.h"
#include "tests/testing/test_env.h"

namespace ddprun::spares {
namespace {

using Clock = std::chrono::steady_clock;
using testing::HostFault;
using testing::SpareCluster;
using testing::SpareClusterOptions;
using namespace std::chrono_literals;

struct Options {
  int faults = 10;
  std::vector<std::string> modes = {"in-process", "cold"};
  std::vector<std::string> kinds = {"kill", "freeze", "cut"};
  std::vector<std::string> variants = {"spare", "no-spare"};
  std::string torchrun;         // torchrun 2.x; "": not measured
  std::string torchrun_worker;  // ddp-train built against torchrun's torch (make torch2-build)
  int gap_steps = 10;           // steady steps between faults
  std::string rdzv_conf;        // more ddprun --rdzv-conf, e.g. liveness=on
  // ddprun's rendezvous: ddprun-rdzv, the built-in server (host 2's agent hosts it) or etcd.
  testing::RdzvServer server = testing::RdzvServer::kRdzvDaemon;
  std::string work_dir;
};

struct JobResult {
  std::string name;
  std::vector<double> recovery_s;
  int64_t recomputed = 0;
  std::string model = "-";  // "identical", "DIFFERENT", "-" (not checked)
  std::string error;
};

HostFault Kind(const std::string& k) {
  return k == "kill" ? HostFault::kKill : k == "freeze" ? HostFault::kFreeze : HostFault::kCut;
}

SpareClusterOptions JobOptions(const Options& o, bool in_process, const std::string& dir) {
  SpareClusterOptions c;
  c.server = o.server;
  c.in_process = in_process;
  c.spares = 0;
  // A 2 s lease finds frozen and cut-off hosts (today's only detector of a silent one); shorter
  // ones lose live nodes on this shared 2-core machine.
  c.keep_alive_interval_s = 0.5;
  c.keep_alive_max_attempt = 4;
  c.preflight = "";  // ddprun's default (auto: on), as a user runs it
  c.steps_per_epoch = 100;
  // Enough steps for every fault: the gap, the recovery and the next spare's start each.
  c.epochs = std::max(2, (o.faults * (o.gap_steps + 40) + 60) / c.steps_per_epoch + 1);
  c.extra_rdzv_conf = o.rdzv_conf;
  c.dir = dir;
  c.run_id = std::filesystem::path(dir).filename();
  return c;
}

void UseTorchrun(const Options& o, SpareClusterOptions& c) {
  // Its recoveries take seconds to a minute of stalled training and each new extra agent seconds
  // to join: more steps, so that training outlasts every fault (the reference has as many).
  c.epochs = (o.faults * 200 + 200) / c.steps_per_epoch + 1;
  c.torchrun = o.torchrun;
  c.torchrun_worker = o.torchrun_worker;
  c.server = testing::RdzvServer::kBuiltIn;
  c.in_process = false;
}

// The final model of a fault-free run of the job (ddprun, or torchrun with its own worker:
// another LibTorch gives other bits); "" when it failed.
std::string Reference(const Options& o, bool torchrun) {
  SpareClusterOptions c =
      JobOptions(o, true, o.work_dir + (torchrun ? "/reference-torchrun" : "/reference"));
  c.spares = 0;
  if (torchrun) UseTorchrun(o, c);
  SpareCluster job(c);
  const std::string started = job.Start(300s);
  const bool done = started.empty() && job.WaitFinished({}, 900s);
  std::cout << (torchrun ? "fault-free run (torchrun): " : "fault-free run: ")
            << (done ? "done" : "FAILED " + started + job.Logs()) << std::endl;
  return done ? job.Model() : "";
}

// Whether `host`'s agent coordinates the etcd rendezvous: it said so last (a later coordinator
// says so too, after the one before it was lost).
bool Coordinates(SpareCluster& job, int host) {
  const std::unique_ptr<testing::Subprocess>& agent = job.node(host).agent;
  return agent != nullptr && agent->running() &&
         agent->err().find("now coordinates the etcd rendezvous") != std::string::npos;
}

// One job under --faults faults.
JobResult RunJob(const Options& o, bool in_process, HostFault fault, bool spare, bool torchrun,
                 const std::string& dir, const std::string& reference) {
  JobResult r;
  SpareClusterOptions c = JobOptions(o, in_process, dir);
  c.spares = spare ? 1 : 0;
  if (torchrun) UseTorchrun(o, c);
  SpareCluster job(c);
  r.error = job.Start(300s);
  if (!r.error.empty()) return r;
  int extra = job.spare_host(0);  // the host outside the world: the spare's, or idle
  const int total = c.epochs * c.steps_per_epoch;
  for (int i = 0; i < o.faults; ++i) {
    const int64_t from = job.HighestStep();
    if (!testing::WaitUntil([&] { return job.HighestStep() >= from + o.gap_steps; }, 120s)) {
      r.error = "training stopped:\n" + job.Logs();
      return r;
    }
    // Group rank 1, unless its host serves the rendezvous (torchrun's store, or ddprun's
    // built-in server, on host 2; etcd's coordinator agent, whose own silence is its lease's
    // to find): then rank 2.
    int victim = job.HostOfGroupRank(1);
    const bool hosts_it = (torchrun || o.server == testing::RdzvServer::kBuiltIn)
                              ? victim == job.member_host(0)
                              : o.server == testing::RdzvServer::kEtcd && Coordinates(job, victim);
    if (hosts_it) victim = job.HostOfGroupRank(2);
    if (victim == 0) {
      r.error = "no node of group rank 1:\n" + job.Logs();
      return r;
    }
    std::vector<int> world = {extra};
    int64_t round = 0;
    for (int h = 2; h <= job.hosts().size(); ++h) {
      if (h == extra || job.node(h).agent == nullptr || !job.node(h).agent->running()) continue;
      round = std::max(round, job.Round(h));
      if (h != victim) world.push_back(h);
    }
    const int64_t step = job.HighestStep();
    if (step > total - 40) break;  // no room left for a recovery
    const auto fault_at = Clock::now();
    job.Inject(fault, victim);
    if (!spare) job.StartNode(extra);  // the replacement, started at the fault
    const auto back = job.WaitFullWorld(fault_at, round, step, world, c.members, 180s);
    if (!back) {
      r.error = absl::StrCat("fault ", i + 1, ": no full-size world within 180 s:\n", job.Logs());
      return r;
    }
    r.recovery_s.push_back(back->seconds);
    r.recomputed += back->recomputed;
    std::cout << absl::StrFormat(
                     "  fault %d: %s -> full size in %.2f s (round %d -> %d), %d step(s) "
                     "recomputed\n",
                     i + 1, job.hosts().Name(victim), back->seconds, round, back->round,
                     back->recomputed)
              << std::flush;
    job.Clear(victim);
    extra = victim;
    if (spare && torchrun) {
      job.StartNode(extra);
      if (!job.node(extra).agent->WaitForOutputContains("redundancy list", 120s)) {
        r.error = "the next extra torchrun agent never waited:\n" + job.Logs();
        return r;
      }
    } else if (spare) {
      job.StartNode(extra);
      const int nodes = c.members + 1;
      if (!testing::WaitUntil([&] { return job.StatusNodes() == nodes; }, 120s)) {
        r.error = "the next spare was never counted:\n" + job.Status() + job.Logs();
        return r;
      }
    }
  }
  if (!job.WaitFinished({extra}, 600s)) {
    r.error = "an agent did not exit 0:\n" + job.Logs();
    return r;
  }
  if (!reference.empty()) r.model = job.Model() == reference ? "identical" : "DIFFERENT";
  std::cout << "  final model: " << r.model << std::endl;
  return r;
}

std::string Row(const JobResult& r) {
  if (!r.error.empty()) return absl::StrCat("| ", r.name, " | failed: see the log | | | | |\n");
  std::vector<double> s = r.recovery_s;
  std::sort(s.begin(), s.end());
  const double p50 = s.empty() ? 0 : s[s.size() / 2];
  const double worst = s.empty() ? 0 : s.back();
  return absl::StrFormat("| %s | %d | %.2f | %.2f | %d | %s |\n", r.name, s.size(), p50, worst,
                         r.recomputed, r.model);
}

int Main(int argc, char** argv) {
  Options o;
  std::string modes = "in-process,cold", kinds = "kill,freeze,cut", variants = "spare,no-spare";
  CLI::App app("spares-bench: a lost node with a spare, without, and under torchrun 2.11");
  app.add_option("--faults", o.faults, "faults per job");
  app.add_option("--modes", modes,
                 "ddprun --restart-mode values (in-process runs --preload=native)");
  app.add_option("--kinds", kinds, "kill, freeze, cut");
  app.add_option("--variants", variants, "spare, no-spare");
  app.add_option("--torchrun", o.torchrun,
                 "also this torchrun (2.x) with the extra node waiting (its redundancy list)");
  app.add_option("--torchrun-worker", o.torchrun_worker,
                 "the ddp-train torchrun runs, built against its torch (make torch2-build)");
  app.add_option("--rdzv-conf", o.rdzv_conf,
                 "more ddprun --rdzv-conf for every job, e.g. liveness=on (the UDP detector)");
  app.add_option("--gap-steps", o.gap_steps, "steady training steps between faults");
  std::string server = "rdzv";
  app.add_option("--server", server, "ddprun's rendezvous: rdzv (ddprun-rdzv), built-in, etcd")
      ->check(CLI::IsMember({"rdzv", "built-in", "etcd"}));
  app.add_option("--work-dir", o.work_dir, "where jobs write (default: a new temporary one)");
  CLI11_PARSE(app, argc, argv);
  o.server = server == "etcd"       ? testing::RdzvServer::kEtcd
             : server == "built-in" ? testing::RdzvServer::kBuiltIn
                                    : testing::RdzvServer::kRdzvDaemon;
  o.modes = absl::StrSplit(modes, ',', absl::SkipEmpty());
  o.kinds = absl::StrSplit(kinds, ',', absl::SkipEmpty());
  o.variants = absl::StrSplit(variants, ',', absl::SkipEmpty());
  for (const std::string& v : o.variants) {
    if (v != "spare" && v != "no-spare") {
      std::cerr << "spares-bench: --variants: unknown variant '" << v << "' (spare, no-spare)\n";
      return 2;
    }
  }
  for (const std::string& k : o.kinds) {
    if (k != "kill" && k != "freeze" && k != "cut") {
      std::cerr << "spares-bench: --kinds: unknown fault '" << k << "' (kill, freeze, cut)\n";
      return 2;
    }
  }
  if (!o.torchrun.empty() && access(o.torchrun_worker.c_str(), X_OK) != 0) {
    std::cerr << "spares-bench: --torchrun-worker: '" << o.torchrun_worker
              << "' is not an executable (ddp-train built against torchrun's torch: make "
                 "torch2-build)\n";
    return 2;
  }
  if (const std::string why = testing::NetHosts::Unavailable(); !why.empty()) {
    std::cerr << "spares-bench: " << why << std::endl;
    return 1;
  }
  std::unique_ptr<testing::TempDir> temp;
  if (o.work_dir.empty()) {
    temp = std::make_unique<testing::TempDir>();
    o.work_dir = temp->path();
  }
  // One fault-free run: every job has the same ranks, data and steps.
  const std::string reference = Reference(o, false);
  const std::string torchrun_reference = o.torchrun.empty() ? "" : Reference(o, true);
  std::vector<JobResult> results;
  int index = 0;
  for (const std::string& kind : o.kinds) {
    for (const std::string& mode : o.modes) {
      for (const std::string& variant : o.variants) {
        const std::string name =
            absl::StrCat("ddprun ", mode == "in-process" ? "in-process --preload=native" : mode,
                         ", ", variant, ", ", testing::HostFaultName(Kind(kind)));
        std::cout << name << std::endl;
        JobResult r =
            RunJob(o, mode == "in-process", Kind(kind), variant == "spare",
                   /*torchrun=*/false, absl::StrCat(o.work_dir, "/job", ++index), reference);
        r.name = name;
        if (!r.error.empty()) std::cout << "  FAILED: " << r.error << std::endl;
        results.push_back(std::move(r));
      }
    }
    if (!o.torchrun.empty()) {
      const std::string name =
          absl::StrCat("torchrun 2.11, extra node waiting, ", testing::HostFaultName(Kind(kind)));
      std::cout << name << std::endl;
      JobResult r = RunJob(o, false, Kind(kind), /*spare=*/true, /*torchrun=*/true,
                           absl::StrCat(o.work_dir, "/job", ++index), torchrun_reference);
      r.name = name;
      if (!r.error.empty()) std::cout << "  FAILED: " << r.error << std::endl;
      results.push_back(std::move(r));
    }
  }
  std::cout
      << "\n| job (3 members + 1 extra host, ddp-train mnist) | faults | fault -> full "
         "size p50 s | worst s | steps recomputed | final model |\n|---|---|---|---|---|---|\n";
  bool ok = true;
  for (const JobResult& r : results) {
    std::cout << Row(r);
    ok = ok && r.error.empty() && r.model != "DIFFERENT";
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace ddprun::spares

int main(int argc, char** argv) { return ddprun::spares::Main(argc, argv); }
