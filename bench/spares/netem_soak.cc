// netem-soak: the false-detection soak of issue 40 point 2. A ddprun-rdzv on host 1 and
// --agents member agents and --spares spare agents on hosts 2.. (namespaced hosts,
// tests/testing/net_hosts.h; with a spare, the default liveness=auto judges silences) run one
// long job (a worker that sleeps until told to stop) while every host's link drops and delays
// what it sends (--netem, default "loss 10% delay 50ms 50ms": each direction of every path
// crosses one impaired link) and spinner processes keep every core busy. A node the
// rendezvous declares lost in that time is a false detection: none may happen. Read from
// three places: the server's log ("round N is over"), its /metrics (ddprun_rdzv_restarts_total
// by cause) and `ddprun status` (round, restarts used), and the agents' events.jsonl
// (failure_detected), and the agents' own logs (an agent that fenced itself: its watch of the
// server gave up). Then a positive control: every process of the last member's host is
// frozen (SIGSTOP, as a hung host) and must be declared lost within --detect-within; its
// detection time (freeze -> the server's log line) is reported, so the soak cannot pass by
// detecting nothing.
//
// Prints a Markdown report (settings, CPU load, measured loss, detections, the server's
// liveness metrics if it has any), writes it as JSON with --json, exits 0 only when no false
// detection happened and the frozen host was found in time. Exits 1 loudly where it cannot
// run (no root, no namespaces, no way to impair a link): a soak that did not run never passes.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "tests/testing/net_hosts.h"
#include "tests/testing/spare_cluster.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun::soak {
namespace {

using Clock = std::chrono::steady_clock;
using testing::NamespacePids;
using testing::NetHosts;
using testing::Subprocess;
using namespace std::chrono_literals;

constexpr char kToken[] = "netem-soak-token";
constexpr char kRunId[] = "soak";

struct Options {
  int seconds = 60;  // of soak, after the round formed
  int agents = 3;    // members (--nnodes)
  int spares = 1;    // agents beyond them: with liveness=auto (the default) a silence decides then
  std::string netem = "loss 10% delay 50ms 50ms";
  std::string impair = "auto";  // auto, netem, relay
  std::string rdzv_conf;        // the agents' --rdzv-conf (e.g. liveness=on)
  int spinners = -1;            // -1: one per core
  bool freeze = true;
  // The positive control's limit; -1: 1 s where the detector decides (liveness=on, or the
  // default auto with a spare: the issue's few hundred milliseconds, with room for the impaired
  // link), else 20 s (the 15 s lease and its tick).
  double detect_within_s = -1;
  std::string work_dir, json, report;
};

// CPU time of the whole machine from /proc/stat's first line.
struct CpuTimes {
  uint64_t busy = 0, total = 0;
  static CpuTimes Read() {
    std::ifstream in("/proc/stat");
    std::string cpu;
    in >> cpu;
    CpuTimes t;
    uint64_t v = 0;
    for (int i = 0; i < 10 && in >> v; ++i) {
      t.total += v;
      if (i != 3 && i != 4) t.busy += v;  // idle, iowait
    }
    return t;
  }
};

// One busy process per core (nice 0, as any job's): they die with this process.
std::vector<pid_t> StartSpinners(int n) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      volatile uint64_t x = 0;
      for (;;) x = x + 1;
    }
    if (pid > 0) pids.push_back(pid);
  }
  return pids;
}

void StopSpinners(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) kill(p, SIGKILL);
  for (pid_t p : pids) waitpid(p, nullptr, 0);
}

// Milliseconds since local midnight of a log stamp "HH:MM:SS.mmm" (common/log.cc), and of now.
int64_t StampMs(const std::string& stamp) {
  int h = 0, m = 0, s = 0, ms = 0;
  if (sscanf(stamp.c_str(), "%d:%d:%d.%d", &h, &m, &s, &ms) != 4) return -1;
  return ((h * 60 + m) * 60 + s) * 1000LL + ms;
}
int64_t NowOfDayMs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  tm local;
  localtime_r(&ts.tv_sec, &local);
  return ((local.tm_hour * 60 + local.tm_min) * 60 + local.tm_sec) * 1000LL + ts.tv_nsec / 1000000;
}

// The server's restarts: "[ddprun-rdzv HH:MM:SS.mmm] run 'soak': round N is over: WHY".
struct ServerRestart {
  std::string stamp, line;
};
std::vector<ServerRestart> ServerRestarts(const std::string& log) {
  static const std::regex re("\\[[^ ]+ ([0-9:.]+)\\] (run '[^']*': round [0-9]+ is over: .*)");
  std::vector<ServerRestart> out;
  std::istringstream in(log);
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_search(line, m, re)) out.push_back({m[1], m[2]});
  }
  return out;
}

class Soak {
 public:
  explicit Soak(const Options& o) : o_(o), hosts_(1 + o.agents + o.spares) {}

  int Run();

 private:
  bool Setup();
  bool StartServer();
  std::unique_ptr<Subprocess> StartAgent(int host);
  // Output of `argv` run on host 1 (curl of /metrics, ddprun status).
  std::string OnServerHost(const std::vector<std::string>& argv,
                           std::map<std::string, std::string> env = {});
  std::string Metrics() {
    return OnServerHost({"curl", "-s", "--max-time", "10", "http://" + http_ + "/metrics"});
  }
  nlohmann::json Status();
  // restarts_total by cause, from /metrics.
  std::map<std::string, int64_t> RestartsByCause(const std::string& metrics);
  std::vector<std::string> FailureEvents();
  void Freeze();
  void Teardown();
  std::string Report();
  void Problem(const std::string& what) {
    std::cerr << "netem-soak: " << what << std::endl;
    problems_.push_back(what);
  }

  const Options& o_;
  NetHosts hosts_;
  testing::TempDir temp_;
  std::string dir_;
  std::vector<pid_t> spinners_;
  std::unique_ptr<Subprocess> server_;
  std::string endpoint_, http_;
  std::vector<std::unique_ptr<Subprocess>> agents_;
  std::string impairer_;
  // Results.
  double soak_s_ = 0, cpu_busy_ = 0, form_s_ = 0;
  std::vector<std::string> false_detections_;
  std::map<std::string, int64_t> restarts_after_soak_;
  std::vector<std::string> liveness_metrics_;
  // UDP flows (the liveness path's heartbeats to the server, its acks to the agents) as
  // delivered by the relays at the end of the soak: their longest silences.
  std::vector<testing::FrameRelay::UdpFlow> heartbeats_, acks_;
  nlohmann::json status_after_soak_;
  std::optional<double> detection_s_;
  std::string detection_line_, detection_cause_;
  std::vector<std::string> problems_;
};

std::string Soak::OnServerHost(const std::vector<std::string>& argv,
                               std::map<std::string, std::string> env) {
  std::vector<std::string> full = {"ip", "netns", "exec", hosts_.Namespace(1)};
  full.insert(full.end(), argv.begin(), argv.end());
  Subprocess q(full, std::move(env));
  q.Wait(30s);
  return q.out();
}

nlohmann::json Soak::Status() {
  const std::string out =
      OnServerHost({testing::BinPath("ddprun"), "status", "--rdzv-endpoint=" + endpoint_,
                    std::string("--rdzv-id=") + kRunId, "--json"},
                   {{"DDPRUN_RDZV_TOKEN", kToken}});
  return nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
}

std::map<std::string, int64_t> Soak::RestartsByCause(const std::string& metrics) {
  static const std::regex re("^ddprun_rdzv_restarts_total\\{cause=\"([a-z_]+)\"\\} ([0-9]+)");
  std::map<std::string, int64_t> out;
  std::istringstream in(metrics);
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_search(line, m, re)) out[m[1]] = std::stoll(m[2]);
  }
  return out;
}

std::vector<std::string> Soak::FailureEvents() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ + "/logs", ec)) {
    if (e.path().filename() != "events.jsonl") continue;
    std::istringstream in(testing::ReadFile(e.path()));
    for (std::string line; std::getline(in, line);) {
      if (line.find("failure_detected") != std::string::npos ||
          line.find("node_lost") != std::string::npos) {
        out.push_back(line);
      }
    }
  }
  return out;
}

bool Soak::StartServer() {
  server_ = std::make_unique<Subprocess>(
      hosts_.On(1, {testing::BinPath("ddprun-rdzv"), "--port=0", "--host=" + hosts_.Address(1),
                    "--http-port=0", "--http-host=" + hosts_.Address(1)}),
      std::map<std::string, std::string>{{"DDPRUN_RDZV_TOKEN", kToken}});
  const std::regex listening("listening on ([^\\s]+)"), http("http on ([^\\s]+)");
  std::smatch m;
  if (!server_->WaitForOutput(
          [&](const std::string& s) {
            return std::regex_search(s, m, listening) && std::regex_search(s, m, http);
          },
          30s)) {
    Problem("ddprun-rdzv did not start: " + server_->err());
    return false;
  }
  const std::string out = server_->out() + server_->err();
  std::regex_search(out, m, listening);
  endpoint_ = m[1];
  std::regex_search(out, m, http);
  http_ = m[1];
  return true;
}

std::unique_ptr<Subprocess> Soak::StartAgent(int host) {
  std::vector<std::string> argv = {
      testing::BinPath("ddprun"), "--rdzv-backend=c10d", "--rdzv-endpoint=" + endpoint_,
      "--nnodes=" + std::to_string(o_.agents), "--nproc-per-node=1", "--max-restarts=100",
      std::string("--rdzv-id=") + kRunId, "--log-dir=" + dir_ + "/logs/" + hosts_.Name(host),
      // The soak judges the liveness path on links that lose a
      // tenth of their frames; a 200 ms TCP probe there is a throw
      // of the dice, and a node kept out would leave no spare.
      "--preflight=off"};
  if (!o_.rdzv_conf.empty()) argv.push_back("--rdzv-conf=" + o_.rdzv_conf);
  argv.push_back("--no-python");
  argv.push_back(dir_ + "/worker.sh");
  return std::make_unique<Subprocess>(
      hosts_.On(host, argv), std::map<std::string, std::string>{{"DDPRUN_RDZV_TOKEN", kToken}});
}

bool Soak::Setup() {
  if (!hosts_.error().empty()) {
    Problem("hosts: " + hosts_.error());
    return false;
  }
  const NetHosts::Impairer how = o_.impair == "netem"   ? NetHosts::Impairer::kNetem
                                 : o_.impair == "relay" ? NetHosts::Impairer::kRelay
                                                        : NetHosts::Impairer::kAuto;
  for (int h = 1; h <= hosts_.size(); ++h) {
    absl::StatusOr<std::string> used = hosts_.Impair(h, o_.netem, how);
    if (!used.ok()) {
      Problem(absl::StrCat("cannot impair ", hosts_.Name(h), "'s link: ", used.status().message()));
      return false;
    }
    impairer_ = *used;
  }
  if (impairer_ == "relay") {
    std::cout << "netem-soak: this kernel has no sch_netem: links impaired by the user-space "
                 "relay (tests/testing/frame_relay.h), same semantics"
              << std::endl;
  }
  dir_ = o_.work_dir.empty() ? temp_.path() : o_.work_dir;
  std::filesystem::create_directories(dir_);
  // The job: one worker per agent that sleeps until DIR/done exists.
  testing::WriteFile(dir_ + "/worker.sh",
                     "#!/bin/sh\necho \"started $(hostname)\" >> " + dir_ + "/log\nwhile [ ! -e " +
                         dir_ + "/done ]; do sleep 0.2; done\n",
                     0755);
  return StartServer();
}

void Soak::Freeze() {
  // The last host that runs a worker: a member, not the spare.
  const std::string log = testing::ReadFile(dir_ + "/log");
  int host = hosts_.size();
  while (host > 2 && log.find("started " + hosts_.Name(host) + "\n") == std::string::npos) --host;
  const std::vector<pid_t> pids = NamespacePids(hosts_.Namespace(host));
  const size_t restarts_before = ServerRestarts(server_->err()).size();
  const int64_t frozen_at = NowOfDayMs();
  for (pid_t p : pids) kill(p, SIGSTOP);
  std::cout << absl::StrFormat("netem-soak: froze %s (%d processes)\n", hosts_.Name(host),
                               pids.size())
            << std::flush;
  std::vector<ServerRestart> restarts;
  testing::WaitUntil(
      [&] {
        restarts = ServerRestarts(server_->err());
        return restarts.size() > restarts_before;
      },
      std::chrono::milliseconds(static_cast<int>(o_.detect_within_s * 1000) + 5000));
  if (restarts.size() > restarts_before) {
    const ServerRestart& r = restarts[restarts_before];
    int64_t ms = StampMs(r.stamp) - frozen_at;
    if (ms < -12 * 3600 * 1000LL) ms += 24 * 3600 * 1000LL;  // across midnight
    detection_s_ = static_cast<double>(ms) / 1000;
    detection_line_ = r.line;
    // The cause, as the survivors' timelines name it (the server's metrics count a restart only
    // once the next round forms, which a fixed world cannot do without the frozen host).
    static const std::regex cause_re("\"cause\":\"([a-z_]+)\"");
    testing::WaitUntil(
        [&] {
          for (const std::string& e : FailureEvents()) {
            std::smatch m;
            if (std::regex_search(e, m, cause_re)) detection_cause_ = m[1];
          }
          return !detection_cause_.empty();
        },
        10s);
    if (*detection_s_ > o_.detect_within_s) {
      Problem(absl::StrFormat("the frozen host was found after %.3f s, over --detect-within %.1f",
                              *detection_s_, o_.detect_within_s));
    }
    if (detection_cause_.rfind("node_lost", 0) != 0) {
      Problem("the frozen host's round ended with cause '" + detection_cause_ +
              "', not a node_lost_* one: " + r.line);
    }
  } else {
    Problem(absl::StrFormat("the frozen host was not declared lost within %.1f s",
                            o_.detect_within_s + 5));
  }
  for (pid_t p : pids) kill(p, SIGCONT);
}

void Soak::Teardown() {
  // The workers exit by themselves; the agents are told to stop (after the freeze a fixed
  // world waits for its lost node: it would not end by itself).
  testing::WriteFile(dir_ + "/done", "");
  for (auto& a : agents_) a->Signal(SIGTERM);
  for (auto& a : agents_) {
    if (!a->Wait(10s)) a->SignalGroup(SIGKILL);
  }
  agents_.clear();
  server_.reset();
  StopSpinners(spinners_);
  spinners_.clear();
}

int Soak::Run() {
  if (!Setup()) return 1;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  spinners_ = StartSpinners(o_.spinners < 0 ? cores : o_.spinners);
  const auto began = Clock::now();
  for (int h = 2; h <= hosts_.size(); ++h) agents_.push_back(StartAgent(h));
  // Until every worker runs, or an agent gave up (it would not come back).
  const bool formed = testing::WaitUntil(
      [&] {
        for (const auto& a : agents_) {
          if (!a->running()) return true;
        }
        return testing::CountOccurrences(testing::ReadFile(dir_ + "/log"), "started") == o_.agents;
      },
      120s);
  if (!formed ||
      testing::CountOccurrences(testing::ReadFile(dir_ + "/log"), "started") != o_.agents) {
    for (const auto& a : agents_) {
      if (!a->running()) Problem("an agent exited before the job ran: " + a->err());
    }
    Problem("the job never ran on every host: " + testing::ReadFile(dir_ + "/log") +
            server_->err());
    Teardown();
    std::cout << Report();
    return 1;
  }
  form_s_ = std::chrono::duration<double>(Clock::now() - began).count();
  std::cout << absl::StrFormat("netem-soak: the round formed in %.1f s; soaking %d s\n", form_s_,
                               o_.seconds)
            << std::flush;
  // The soak: nothing to do but watch; a restart seen early is reported at once.
  const CpuTimes cpu0 = CpuTimes::Read();
  const auto soak_start = Clock::now();
  const auto soak_end = soak_start + std::chrono::seconds(o_.seconds);
  size_t seen = 0;
  while (Clock::now() < soak_end) {
    std::this_thread::sleep_for(1s);  // a watch interval, not a wait for something
    const std::vector<ServerRestart> r = ServerRestarts(server_->err());
    for (; seen < r.size(); ++seen) {
      std::cout << "netem-soak: FALSE DETECTION at " << r[seen].stamp << ": " << r[seen].line
                << std::endl;
      false_detections_.push_back(r[seen].stamp + " " + r[seen].line);
    }
  }
  const CpuTimes cpu1 = CpuTimes::Read();
  soak_s_ = std::chrono::duration<double>(Clock::now() - soak_start).count();
  cpu_busy_ = static_cast<double>(cpu1.busy - cpu0.busy) /
              static_cast<double>(std::max<uint64_t>(1, cpu1.total - cpu0.total));
  // The silences the two ends of the liveness path met (relay only: it sees every frame).
  for (int h = 1; h <= hosts_.size(); ++h) {
    for (const auto& f : hosts_.UdpFlowsTo(h)) {
      if (f.frames < 100) continue;  // not a heartbeat stream
      (h == 1 ? heartbeats_ : acks_).push_back(f);
      std::cout << absl::StrFormat("netem-soak: udp %s -> %s: %d datagrams, longest gap %.0f ms\n",
                                   f.from, f.to, f.frames,
                                   static_cast<double>(f.longest_gap.count()) / 1000);
    }
  }
  // Every other witness of a loss: the metrics, the run's status, the agents' timelines.
  const std::string metrics = Metrics();
  if (metrics.empty()) Problem("no /metrics from " + http_);
  restarts_after_soak_ = RestartsByCause(metrics);
  for (const auto& [cause, n] : restarts_after_soak_) {
    if (n > 0) false_detections_.push_back(absl::StrCat("/metrics: ", n, " restart(s) ", cause));
  }
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("#", 0) != 0 &&
        (line.find("liveness") != std::string::npos || line.find("silen") != std::string::npos ||
         line.find("phi") != std::string::npos)) {
      liveness_metrics_.push_back(line);
    }
  }
  status_after_soak_ = Status();
  if (status_after_soak_.is_discarded()) {
    Problem("ddprun status gave no JSON");
  } else if (status_after_soak_.value("restarts_used", 0) != 0 ||
             status_after_soak_.value("round", 0) != 1) {
    false_detections_.push_back("ddprun status: " + status_after_soak_.dump());
  }
  for (const std::string& e : FailureEvents()) false_detections_.push_back("events.jsonl: " + e);
  // The other side: an agent whose own watch of the server gave up fences itself.
  for (size_t i = 0; i < agents_.size(); ++i) {
    std::istringstream log(agents_[i]->err());
    for (std::string line; std::getline(log, line);) {
      if (line.find("fenced") != std::string::npos) {
        false_detections_.push_back(absl::StrCat(hosts_.Name(static_cast<int>(i) + 2), ": ", line));
      }
    }
  }
  for (const auto& a : agents_) {
    if (!a->running()) Problem("an agent exited during the soak: " + a->err());
  }
  if (o_.freeze) Freeze();
  Teardown();
  const std::string report = Report();
  std::cout << "\n" << report;
  if (!o_.report.empty()) std::ofstream(o_.report, std::ios::app) << report << "\n";
  return false_detections_.empty() && problems_.empty() ? 0 : 1;
}

std::string Soak::Report() {
  std::string out = "## netem soak (issue 40 point 2)\n\n";
  absl::StrAppendFormat(
      &out,
      "- settings: %d member agents, %d spare(s) + ddprun-rdzv on namespaced hosts, `%s` on "
      "every host's egress (%s), %d spinner(s) on %d core(s), --rdzv-conf=`%s`\n",
      o_.agents, o_.spares, o_.netem, impairer_,
      o_.spinners < 0 ? static_cast<int>(std::thread::hardware_concurrency()) : o_.spinners,
      std::thread::hardware_concurrency(), o_.rdzv_conf);
  absl::StrAppendFormat(&out, "- soak: %.0f s after the round formed (%.1f s); CPU busy %.0f %%\n",
                        soak_s_, form_s_, 100 * cpu_busy_);
  uint64_t passed = 0, dropped = 0;
  for (int h = 1; h <= hosts_.size(); ++h) {
    if (auto c = hosts_.ImpairedCounts(h)) {
      passed += c->passed;
      dropped += c->dropped;
    }
  }
  if (passed + dropped > 0) {
    absl::StrAppendFormat(
        &out, "- frames: %d sent, %d dropped (%.1f %%); relay real-time: %s\n", passed + dropped,
        dropped, 100.0 * static_cast<double>(dropped) / static_cast<double>(passed + dropped),
        hosts_.RelaysRealtime() ? "yes" : "no");
  }
  auto longest = [](const std::vector<testing::FrameRelay::UdpFlow>& flows) {
    std::chrono::microseconds m{0};
    uint64_t frames = 0;
    for (const auto& f : flows) {
      m = std::max(m, f.longest_gap);
      frames += f.frames;
    }
    return std::make_pair(static_cast<double>(m.count()) / 1000, frames);
  };
  const auto [hb_gap, hb_frames] = longest(heartbeats_);
  const auto [ack_gap, ack_frames] = longest(acks_);
  if (!heartbeats_.empty()) {
    absl::StrAppendFormat(&out,
                          "- longest silence met by the server: %.0f ms (%d heartbeat flows, %d "
                          "datagrams delivered); by an agent (acks): %.0f ms (%d flows, %d)\n",
                          hb_gap, heartbeats_.size(), hb_frames, ack_gap, acks_.size(), ack_frames);
  }
  absl::StrAppendFormat(&out, "- false detections: %d\n", false_detections_.size());
  for (const std::string& f : false_detections_) absl::StrAppend(&out, "  - ", f, "\n");
  for (const std::string& l : liveness_metrics_) absl::StrAppend(&out, "- metric: `", l, "`\n");
  if (o_.freeze) {
    if (detection_s_) {
      absl::StrAppendFormat(&out,
                            "- positive control: a frozen host declared lost in %.3f s (%s): %s\n",
                            *detection_s_, detection_cause_, detection_line_);
    } else {
      absl::StrAppend(&out, "- positive control: the frozen host was NOT declared lost\n");
    }
  }
  for (const std::string& p : problems_) absl::StrAppend(&out, "- problem: ", p, "\n");
  absl::StrAppend(
      &out, "- verdict: ", false_detections_.empty() && problems_.empty() ? "PASS" : "FAIL", "\n");
  if (!o_.json.empty()) {
    nlohmann::json j = {{"agents", o_.agents},
                        {"spares", o_.spares},
                        {"netem", o_.netem},
                        {"impairer", impairer_},
                        {"rdzv_conf", o_.rdzv_conf},
                        {"soak_s", soak_s_},
                        {"cpu_busy", cpu_busy_},
                        {"frames_sent", passed + dropped},
                        {"frames_dropped", dropped},
                        {"false_detections", false_detections_},
                        {"longest_heartbeat_silence_ms", hb_gap},
                        {"longest_ack_silence_ms", ack_gap},
                        {"liveness_metrics", liveness_metrics_},
                        {"problems", problems_}};
    if (detection_s_) {
      j["detection_s"] = *detection_s_;
      j["detection_cause"] = detection_cause_;
    }
    std::ofstream(o_.json) << j.dump(2) << "\n";
  }
  return out;
}

int Main(int argc, char** argv) {
  Options o;
  CLI::App app("netem-soak: no false detection of a lost node on impaired, busy hosts");
  app.add_option("--seconds", o.seconds, "seconds of soak after the round formed (default 60)")
      ->check(CLI::PositiveNumber);
  app.add_option("--agents", o.agents, "members, each on a host of its own (default 3)")
      ->check(CLI::Range(1, 32));
  app.add_option("--spares", o.spares, "agents beyond the members, each on a host (default 1)")
      ->check(CLI::Range(0, 8));
  app.add_option("--netem", o.netem, "netem arguments on every host's egress");
  app.add_option("--impair", o.impair,
                 "netem, relay (user space) or auto (netem if the kernel has it)")
      ->check(CLI::IsMember({"auto", "netem", "relay"}));
  app.add_option("--rdzv-conf", o.rdzv_conf,
                 "the agents' --rdzv-conf (default: none, so liveness=auto), e.g. liveness=on");
  app.add_option("--spinners", o.spinners, "busy processes (default: one per core)");
  app.add_flag("!--no-freeze", o.freeze, "skip the positive control (a frozen host)");
  app.add_option(
      "--detect-within", o.detect_within_s,
      "seconds the frozen host must be declared lost in (default 1 where the detector decides: "
      "liveness=on, or auto with a spare; else 20)");
  app.add_option("--work-dir", o.work_dir, "where the job writes (default: a temporary folder)");
  app.add_option("--json", o.json, "write the report as JSON here");
  app.add_option("--report", o.report, "append the Markdown report here");
  CLI11_PARSE(app, argc, argv);
  if (const std::string why = NetHosts::Unavailable(); !why.empty()) {
    std::cerr << "netem-soak: cannot run: " << why << std::endl;
    return 1;
  }
  if (o.detect_within_s < 0) {
    const bool on = o.rdzv_conf.find("liveness=on") != std::string::npos;
    const bool off = o.rdzv_conf.find("liveness=off") != std::string::npos;
    o.detect_within_s = on || (o.spares > 0 && !off) ? 1.0 : 20.0;
  }
  Soak soak(o);
  return soak.Run();
}

}  // namespace
}  // namespace ddprun::soak

int main(int argc, char** argv) { return ddprun::soak::Main(argc, argv); }
