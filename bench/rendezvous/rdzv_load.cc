// rdzv-load: a load generator for the rendezvous server. Starts ddprun-rdzv (or uses
// --endpoint), opens --agents simulated agents as streams over --channels TCP connections, all
// joining one run with --nnodes=N:N, and measures:
//   1. time from the first join until every agent has its assignment;
//   2. the server's CPU while every agent heartbeats every --keep-alive seconds;
//   3. failure-to-restart: one agent reports a worker failure; time until every agent has the
//      restart and the next round's assignment.
// With --liveness the run has the liveness path on (rendezvous/liveness/): after the gRPC
// heartbeats, every agent sends authenticated heartbeat datagrams every --liveness-interval-ms
// for --heartbeat-seconds (from --liveness-threads sockets, spread over the interval), and the
// server's CPU for receiving, judging and acking them is reported, with the packets it acked
// and whether any agent was declared silent.
// With --scrape-http the daemon also serves /metrics (--http-port 0) and a scraper GETs it
// every second for the whole run, as Prometheus would: the cost of being watched.
// The server runs in its own process so that its CPU (from /proc/PID/stat) is its own.
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "rendezvous/grpc/agent_call.h"
#include "rendezvous/grpc/proto_convert.h"
#include "rendezvous/grpc/rendezvous_client.h"
#include "rendezvous/grpc/security.h"
#include "rendezvous/liveness/packet.h"
#include "rendezvous/liveness/udp_socket.h"
#include "tests/testing/loopback.h"

extern char** environ;

namespace ddprun::rendezvous {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// CPU seconds (user + system) used so far by `pid`.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string f;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stol(f);
    if (i == 15) stime = std::stol(f);
  }
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

// Everything the simulated agents report, with waits on it.
class Tally {
 public:
  void Assigned(int64_t round) {
    absl::MutexLock lock(&mu_);
    if (round >= static_cast<int64_t>(assigned_.size())) assigned_.resize(round + 1, 0);
    ++assigned_[round];
  }
  void Restarted() {
    absl::MutexLock lock(&mu_);
    ++restarts_;
  }
  void Closed() {
    absl::MutexLock lock(&mu_);
    ++closed_;
  }
  bool WaitAssigned(int64_t round, int n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return closed_ > 0 ||
             (round < static_cast<int64_t>(assigned_.size()) && assigned_[round] >= n);
    };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout) && closed_ == 0;
  }
  int closed() {
    absl::MutexLock lock(&mu_);
    return closed_;
  }
  int restarts() {
    absl::MutexLock lock(&mu_);
    return restarts_;
  }

 private:
  absl::Mutex mu_;
  std::vector<int> assigned_ ABSL_GUARDED_BY(mu_);
  int restarts_ ABSL_GUARDED_BY(mu_) = 0;
  int closed_ ABSL_GUARDED_BY(mu_) = 0;
};

// What an agent's Joined said about the liveness path.
struct LivenessJoin {
  std::atomic<int> port{0};
  uint32_t index = 0;
  int interval_ms = 0;  // the run's, as the server fitted it to the run's size
  std::optional<PacketMac> mac;
};

// The liveness phase: `joins` agents' heartbeats every `interval` for `seconds`, from `threads`
// sockets, each thread sending its share spread over the interval (sendmmsg in batches), and
// reading (counting) the acks. Returns the acks received.
uint64_t SendLivenessHeartbeats(const std::string& host, std::vector<LivenessJoin>& joins,
                                std::chrono::milliseconds interval, double seconds, int threads,
                                uint64_t* sent_total) {
  std::atomic<uint64_t> acks{0}, sent{0};
  std::vector<std::thread> senders;
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(seconds));
  for (int t = 0; t < threads; ++t) {
    senders.emplace_back([&, t] {
      absl::StatusOr<UdpSocket> socket = ConnectUdp(host, joins[0].port.load());
      if (!socket.ok()) return;
      std::vector<size_t> mine;
      for (size_t i = t; i < joins.size(); i += threads) mine.push_back(i);
      std::vector<uint64_t> seq(mine.size(), 0);
      // 1 ms slices: each sends the agents whose turn in the interval falls in it.
      // Each slice sends its share, the fraction carried over: with fewer agents than slices, one
      // every few slices, not one every slice.
      const int slices = std::max<int>(1, static_cast<int>(interval.count()));
      const double per_slice = static_cast<double>(mine.size()) / slices;
      const auto most = static_cast<size_t>(std::ceil(per_slice));
      double owed = 0;
      size_t next = 0;
      std::vector<PacketBytes> out(most);
      std::vector<iovec> iov(most);
      std::vector<mmsghdr> msgs(most);
      uint8_t ack[kPacketBytes + 1];
      auto slice_at = Clock::now();
      while (Clock::now() < until) {
        owed += per_slice;
        const size_t due = std::min(most, static_cast<size_t>(owed));
        owed -= static_cast<double>(due);
        size_t n = 0;
        for (; n < due && !mine.empty(); ++n, next = (next + 1) % mine.size()) {
          LivenessPacket p;
          p.node_index = joins[mine[next]].index;
          p.incarnation = 1;
          p.seq = ++seq[next];
          // Says it follows the silence verdict (liveness=on offers it from the first ack), so
          // that the server judges every agent, as it would real ones.
          p.verdict = SilenceVerdict::kBySilence;
          p.echo = 1;
          out[n] = EncodePacket(p, *joins[mine[next]].mac);
          iov[n] = {out[n].data(), out[n].size()};
          msgs[n] = {};
          msgs[n].msg_hdr.msg_iov = &iov[n];
          msgs[n].msg_hdr.msg_iovlen = 1;
        }
        for (size_t done = 0; done < n;) {
          const int r = sendmmsg(socket->fd(), msgs.data() + done, n - done, 0);
          if (r <= 0) break;
          done += r;
          sent += r;
        }
        while (recv(socket->fd(), ack, sizeof(ack), MSG_DONTWAIT) > 0) ++acks;
        // Pacing of the generator itself (one slice a millisecond), not a wait in a test.
        slice_at += std::chrono::milliseconds(1);
        std::this_thread::sleep_until(slice_at);
      }
      const auto drain_until = Clock::now() + std::chrono::milliseconds(100);
      while (Clock::now() < drain_until) {
        while (recv(socket->fd(), ack, sizeof(ack), MSG_DONTWAIT) > 0) ++acks;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  for (std::thread& s : senders) s.join();
  *sent_total = sent.load();
  return acks.load();
}

struct Daemon {
  pid_t pid = -1;
  std::string endpoint;
  int http_port = 0;
};

std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
  return line;
}

// GET /metrics on loopback with the token; the body's size, or -1.
long ScrapeOnce(int port, const std::string& token) {
  const std::string answer = ddprun::testing::LoopbackExchange(
      port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer " +
                token + "\r\n\r\n");
  if (answer.rfind("HTTP/1.1 200", 0) != 0) return -1;
  return static_cast<long>(answer.size() - answer.find("\r\n\r\n") - 4);
}

// Scrapes every second until stopped, like a Prometheus server with scrape_interval 1s.
class Scraper {
 public:
  Scraper(int port, std::string token) : port_(port), token_(std::move(token)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Scraper() {
    stop_.Notify();
    thread_.join();
  }
  std::string Summary() {
    std::sort(ms_.begin(), ms_.end());
    return absl::StrCat(ms_.size(), " scrapes of /metrics (", failed_, " failed), median ",
                        ms_.empty() ? 0.0 : ms_[ms_.size() / 2], " ms, ", bytes_, " bytes");
  }

 private:
  void Run() {
    do {
      const auto t0 = Clock::now();
      const long bytes = ScrapeOnce(port_, token_);
      if (bytes < 0) {
        ++failed_;
      } else {
        ms_.push_back(1000 * Seconds(Clock::now() - t0));
        bytes_ = bytes;
      }
    } while (!stop_.WaitForNotificationWithTimeout(absl::Seconds(1)));
  }
  const int port_;
  const std::string token_;
  absl::Notification stop_;
  std::vector<double> ms_;
  int failed_ = 0;
  long bytes_ = 0;
  std::thread thread_;
};

// Starts ddprun-rdzv --port 0 and reads the port it prints.
absl::StatusOr<Daemon> StartDaemon(const std::string& path, const std::string& token, bool http) {
  int out[2];
  if (pipe(out) != 0) return absl::InternalError("pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  setenv(kTokenEnv, token.c_str(), 1);
  std::vector<char*> argv = {const_cast<char*>(path.c_str()), const_cast<char*>("--port"),
                             const_cast<char*>("0")};
  if (http) argv.push_back(const_cast<char*>("--http-port=0"));
  argv.push_back(nullptr);
  Daemon d;
  if (posix_spawn(&d.pid, path.c_str(), &actions, nullptr, argv.data(), environ) != 0) {
    return absl::InternalError("cannot start " + path);
  }
  close(out[1]);
  const std::string line = ReadLine(out[0]);
  const std::string prefix = "ddprun-rdzv listening on ";
  if (line.rfind(prefix, 0) != 0) return absl::InternalError("daemon said: " + line);
  d.endpoint = line.substr(prefix.size());
  if (http) {
    const std::string http_line = ReadLine(out[0]);
    d.http_port = std::atoi(http_line.substr(http_line.rfind(':') + 1).c_str());
    if (d.http_port <= 0) return absl::InternalError("daemon said: " + http_line);
  }
  close(out[0]);
  return d;
}

int Main(int argc, char** argv) {
  int agents = 10000, channels = 16, nproc = 8, client_threads = 4;
  double heartbeat_seconds = 10, keep_alive = 1.0;
  std::string endpoint, daemon_path;
  bool scrape_http = false;
  bool liveness = false;
  int liveness_interval_ms = 20, liveness_threads = 2;
  int64_t liveness_max_rate = LivenessSettings{}.max_rate;
  CLI::App app{"rendezvous load generator"};
  app.add_option("--agents", agents, "simulated agents (one stream each)");
  app.add_option("--channels", channels, "TCP connections the streams share");
  app.add_option("--client-threads", client_threads, "threads starting the streams");
  app.add_option("--nproc", nproc, "workers per simulated node (for the world size only)");
  app.add_option("--heartbeat-seconds", heartbeat_seconds, "length of the heartbeat phase");
  app.add_option("--keep-alive", keep_alive, "heartbeat interval in seconds");
  app.add_option("--endpoint", endpoint, "use this server instead of starting ddprun-rdzv");
  app.add_option("--daemon", daemon_path, "ddprun-rdzv to start (default: next to this binary)");
  app.add_flag("--scrape-http", scrape_http,
               "serve /metrics (--http-port 0) and GET it every second during the run");
  app.add_flag("--liveness", liveness,
               "the run has the liveness path on; its heartbeat phase sends datagrams");
  app.add_option("--liveness-interval-ms", liveness_interval_ms,
                 "the liveness heartbeat interval asked (the server may stretch it)");
  app.add_option("--liveness-max-rate", liveness_max_rate,
                 "the run's liveness_max_rate (heartbeats a second the server takes)");
  app.add_option("--liveness-threads", liveness_threads, "sockets sending the datagrams");
  CLI11_PARSE(app, argc, argv);

  const std::string token = "load-test-token";
  Daemon daemon;
  if (endpoint.empty()) {
    if (daemon_path.empty()) {
      std::string self(argv[0]);
      daemon_path = self.substr(0, self.rfind('/') + 1) + "ddprun-rdzv";
    }
    absl::StatusOr<Daemon> d = StartDaemon(daemon_path, token, scrape_http);
    if (!d.ok()) {
      std::fprintf(stderr, "rdzv-load: %s\n", std::string(d.status().message()).c_str());
      return 1;
    }
    daemon = *d;
    endpoint = daemon.endpoint;
  }
  // Whichever way this ends, the daemon goes with it (an orphan would keep the caller's pipe open).
  absl::Cleanup stop_daemon = [&daemon] {
    if (daemon.pid <= 0) return;
    kill(daemon.pid, SIGTERM);
    int status = 0;
    waitpid(daemon.pid, &status, 0);
  };

  std::unique_ptr<Scraper> scraper;
  if (daemon.http_port > 0) scraper = std::make_unique<Scraper>(daemon.http_port, token);
  ClientOptions options;
  options.endpoint = endpoint;
  std::vector<std::shared_ptr<grpc::Channel>> pool;
  for (int i = 0; i < channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one TCP connection per channel
    args.SetInt("ddprun.load.channel", i);
    pool.push_back(grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(), args));
  }

  RunTimeouts timeouts;
  timeouts.keep_alive_interval = std::chrono::milliseconds(static_cast<int>(keep_alive * 1000));
  // The lease outlasts the liveness phase, in which the simulated agents send no gRPC heartbeat:
  // a loss there is the liveness path's, never the lease's.
  timeouts.keep_alive_max_attempt =
      std::max(10, static_cast<int>(std::ceil((heartbeat_seconds + 5) / keep_alive)));
  timeouts.last_call_timeout = std::chrono::seconds(0);
  timeouts.liveness.mode = liveness ? LivenessMode::kOn : LivenessMode::kOff;
  timeouts.liveness.interval = std::chrono::milliseconds(liveness_interval_ms);
  timeouts.liveness.max_rate = liveness_max_rate;
  std::vector<LivenessJoin> liveness_joins(agents);
  Tally tally;
  std::vector<std::unique_ptr<AgentCall>> calls;
  calls.reserve(agents);
  // Built before the clock starts: client-side allocations are not the server's joining time.
  std::vector<proto::AgentMessage> joins(agents);
  for (int i = 0; i < agents; ++i) {
    auto call = std::make_unique<AgentCall>(
        [&tally, &lj = liveness_joins[i]](proto::ServerMessage m) {
          if (m.has_joined() && m.joined().liveness_port() > 0) {
            lj.index = m.joined().liveness_node_index();
            lj.interval_ms = static_cast<int>(m.joined().liveness().interval_ms());
            lj.mac.emplace(
                DeriveLivenessKey(m.joined().member_key(), m.joined().liveness_salt(), lj.index));
            lj.port = m.joined().liveness_port();  // last: the sender threads read it after
          }
          if (m.has_assignment()) tally.Assigned(m.assignment().round());
          if (m.has_restart()) tally.Restarted();
          if (m.has_close()) tally.Closed();
        },
        [](grpc::Status) {});
    call->context()->AddMetadata(kAuthMetadataKey, AuthMetadataValue(token));
    call->context()->set_wait_for_ready(true);
    NodeInfo node;
    node.run_id = "load";
    node.node_id = absl::StrCat("sim", i);
    node.hostname = absl::StrCat("sim", i);
    node.min_nodes = node.max_nodes = agents;
    node.nproc_per_node = nproc;
    node.max_restarts = 3;
    node.master_port = 29500;
    *joins[i].mutable_join() = ToProto(node, timeouts);
    calls.push_back(std::move(call));
  }
  const double cpu_join0 = daemon.pid > 0 ? ProcessCpuSeconds(daemon.pid) : 0;
  const auto t0 = Clock::now();
  std::vector<std::thread> starters;
  for (int t = 0; t < client_threads; ++t) {
    starters.emplace_back([&, t] {
      for (int i = t; i < agents; i += client_threads) {
        calls[i]->Start(pool[i % channels], std::move(joins[i]));
      }
    });
  }
  for (std::thread& t : starters) t.join();
  const auto t_sent = Clock::now();
  if (!tally.WaitAssigned(1, agents, absl::Seconds(120))) {
    std::fprintf(stderr, "rdzv-load: not every agent was assigned (closed: %d)\n", tally.closed());
    return 1;
  }
  const auto t_assigned = Clock::now();
  std::printf(
      "agents=%d channels=%d: all joins sent in %.3f s; all assigned %.3f s after the "
      "first join (%.3f s after the last); server CPU %.3f s\n",
      agents, channels, Seconds(t_sent - t0), Seconds(t_assigned - t0),
      Seconds(t_assigned - t_sent),
      daemon.pid > 0 ? ProcessCpuSeconds(daemon.pid) - cpu_join0 : -1.0);

  // Heartbeats: every agent every keep_alive seconds, spread over the interval.
  double cpu_per_second = -1;
  if (heartbeat_seconds > 0) {
    const double cpu0 = daemon.pid > 0 ? ProcessCpuSeconds(daemon.pid) : 0;
    const auto h0 = Clock::now();
    const auto interval = timeouts.keep_alive_interval;
    int next = 0;
    const int per_slice = std::max(1, agents / 100);
    while (Clock::now() - h0 < std::chrono::duration<double>(heartbeat_seconds)) {
      for (int k = 0; k < per_slice; ++k) {
        proto::AgentMessage hb;
        hb.mutable_heartbeat();
        calls[next]->Send(std::move(hb));
        next = (next + 1) % agents;
      }
      // Pacing of the generator itself (100 slices per interval), not a wait in a test.
      std::this_thread::sleep_for(interval / 100);
    }
    const double elapsed = Seconds(Clock::now() - h0);
    if (daemon.pid > 0) {
      cpu_per_second = (ProcessCpuSeconds(daemon.pid) - cpu0) / elapsed;
      std::printf("heartbeats: %.0f per second for %.1f s: server CPU %.1f%% of one core\n",
                  agents / keep_alive, elapsed, 100 * cpu_per_second);
    }
    if (tally.restarts() > 0 || tally.closed() > 0) {
      std::fprintf(stderr, "rdzv-load: unexpected restart or close during heartbeats\n");
      return 1;
    }
  }

  // A worker failure on one node: every node gets the restart and the next assignment.
  const auto f0 = Clock::now();
  proto::AgentMessage failed;
  failed.mutable_group_status()->set_round(1);
  failed.mutable_group_status()->set_state(proto::GroupStatus::FAILED);
  failed.mutable_group_status()->mutable_failure()->set_hostname("sim0");
  failed.mutable_group_status()->mutable_failure()->set_exit_code(1);
  calls[0]->Send(std::move(failed));
  if (!tally.WaitAssigned(2, agents, absl::Seconds(60))) {
    std::fprintf(stderr, "rdzv-load: the restart did not reach every agent\n");
    return 1;
  }
  std::printf("worker failure on one node -> all %d nodes restarted and reassigned in %.3f s\n",
              agents, Seconds(Clock::now() - f0));

  // Last: once it ends, every agent falls silent and the server declares them lost.
  if (liveness && heartbeat_seconds > 0) {
    for (const LivenessJoin& j : liveness_joins) {
      if (j.port.load() == 0) {
        std::fprintf(stderr, "rdzv-load: an agent's Joined named no liveness port\n");
        return 1;
      }
    }
    // What the server told the agents: it stretches the interval asked for a large run.
    const int interval_ms = liveness_joins[0].interval_ms;
    const int restarts_before = tally.restarts();
    const double cpu0 = daemon.pid > 0 ? ProcessCpuSeconds(daemon.pid) : 0;
    const auto l0 = Clock::now();
    uint64_t sent = 0;
    const uint64_t acks = SendLivenessHeartbeats(
        endpoint.substr(0, endpoint.rfind(':')), liveness_joins,
        std::chrono::milliseconds(interval_ms), heartbeat_seconds, liveness_threads, &sent);
    const double elapsed = Seconds(Clock::now() - l0);
    std::printf(
        "liveness: %d agents every %d ms (asked %d; %.0f datagrams/s): sent %.0f/s, acked %.0f/s "
        "(%.1f%%)",
        agents, interval_ms, liveness_interval_ms, agents * 1000.0 / interval_ms, sent / elapsed,
        acks / elapsed, sent > 0 ? 100.0 * acks / sent : 0.0);
    if (daemon.pid > 0) {
      std::printf(": server CPU %.1f%% of one core",
                  100 * (ProcessCpuSeconds(daemon.pid) - cpu0) / elapsed);
    }
    std::printf("\n");
    if (tally.restarts() > restarts_before || tally.closed() > 0) {
      std::fprintf(stderr, "rdzv-load: an agent was declared lost during the liveness phase\n");
      return 1;
    }
  }

  if (scraper != nullptr) std::printf("http: %s\n", scraper->Summary().c_str());
  scraper.reset();
  for (auto& call : calls) call->Cancel();
  for (auto& call : calls) call->done().WaitForNotification();
  return 0;
}

}  // namespace
}  // namespace ddprun::rendezvous

int main(int argc, char** argv) { return ddprun::rendezvous::Main(argc, argv); }
