// The gRPC rendezvous plugin (libddprun_grpc.so): the built-in server and client behind
// grpc_rendezvous_plugin.h. Loaded by ddprun only for c10d jobs and `ddprun status`.
#include "rendezvous/api/grpc_rendezvous_plugin.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/env_variables.h"
#include "common/log.h"
#include "common/strings.h"
#include "rendezvous/checkpoints/checkpoint_advisor.h"
#include "rendezvous/etcd/etcd_rendezvous.h"
#include "rendezvous/etcd/etcd_status.h"
#include "rendezvous/grpc/rendezvous_client.h"
#include "rendezvous/grpc/rendezvous_server.h"
#include "rendezvous/grpc/run_status_query.h"
#include "rendezvous/grpc/security.h"
#include "rendezvous/grpc/served_run.h"
#include "rendezvous/preflight/preflight_judge.h"

namespace ddprun::launcher {
namespace {

// Whether something on this host already listens on `port` (another agent of the job, or
// ddprun-rdzv): then this agent joins that server instead of starting its own. Asked before
// starting gRPC, whose failed bind would log an error.
bool PortInUse(const std::string& host, int port) {
  // Bind the wildcard of the family the server would bind (see Create), without SO_REUSEADDR:
  // any listener on that port, on any address of this family, makes it fail.
  const bool v6 = host.find(':') != std::string::npos;
  const int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int rc;
  if (v6) {
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(static_cast<uint16_t>(port));
    rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } else {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  }
  const bool in_use = rc != 0 && errno == EADDRINUSE;
  close(fd);
  return in_use;
}

absl::StatusOr<rendezvous::ClientOptions> ClientOptionsFor(const C10dSettings& s) {
  rendezvous::ClientOptions c;
  c.endpoint = FormatHostPort(s.endpoint_host, s.endpoint_port);
  auto token = rendezvous::LoadToken(s.token_file);
  if (!token.ok()) return token.status();
  c.token = *token;
  c.tls.ca_file = s.tls_ca;
  c.tls.server_name_override = s.tls_server_name;
  c.tls.required = s.tls_required;
  if (!s.tls_client_ca.empty()) {  // the server wants client certificates: present ours
    c.tls.cert_file = s.tls_cert;
    c.tls.key_file = s.tls_key;
  }
  c.timeouts = s.timeouts;
  c.host_loss = s.host_loss;
  c.read_timeout = s.read_timeout;
  c.rpc_timeout = s.rpc_timeout;
  if (s.close_timeout) c.close_timeout = *s.close_timeout;
  c.on_server_heard = s.on_server_heard;
  c.on_liveness_ack = s.on_liveness_ack;
  return c;
}

// Whether the server at `endpoint` serves the open run `run_id`. Refused or silent addresses
// are passed over quickly (a probe first), so that a list of hosts where nothing listens costs
// milliseconds at the start of a job.
bool ServesOpenRun(const rendezvous::ClientOptions& options, const std::string& endpoint,
                   const std::string& run_id) {
  return rendezvous::AskServer(options, endpoint, run_id, std::chrono::milliseconds(300),
                               std::chrono::milliseconds(1000))
      .has_value();
}

// Where the run is served when not at the first endpoint: a run whose hosting agent was lost
// moved to a successor, which serves at its own address (one of `other_endpoints` when the
// user listed the job's hosts). The agent that would host at the first endpoint, restarted,
// joins the run there instead of starting a second server, and so does a node that joins late.
// Empty: not moved (or nothing listed): the first endpoint, as without a list.
std::string MovedRunEndpoint(const C10dSettings& s, const rendezvous::ClientOptions& options) {
  if (s.other_endpoints.empty()) return "";
  if (!s.host_here && ServesOpenRun(options, options.endpoint, s.run_id)) return "";
  for (const std::string& other : s.other_endpoints) {
    if (ServesOpenRun(options, other, s.run_id)) return other;
  }
  return "";
}

// The embedded server's options from the settings (`port`: where it listens).
rendezvous::ServerOptions ServerOptionsFor(const C10dSettings& s, const std::string& token,
                                           int port) {
  rendezvous::ServerOptions o;
  o.host = s.endpoint_host.find(':') != std::string::npos ? "::" : "0.0.0.0";
  o.port = port;
  o.token = token;
  o.tls.cert_file = s.tls_cert;
  o.tls.key_file = s.tls_key;
  o.tls.client_ca_file = s.tls_client_ca;
  o.default_timeouts = s.timeouts;
  o.embedded = true;
  o.round_quorum = s.host_loss == rendezvous::HostLoss::kFailOver
                       ? rendezvous::RoundQuorum::kMajorityOfLastRound
                       : rendezvous::RoundQuorum::kAnyNodes;
  if (s.http_port.has_value()) {
    rendezvous::HttpOptions http;
    http.host = s.http_host;
    http.port = *s.http_port;
    o.http = http;
  }
  return o;
}

// Thread-safe: the agent's thread calls it while the client's thread may start or stop the
// hosted server (failover); the hosted server's state is guarded by mu_.
class GrpcRendezvousImpl final : public GrpcRendezvous {
 public:
  GrpcRendezvousImpl(std::unique_ptr<rendezvous::RendezvousServer> server,
                     rendezvous::ClientOptions options, rendezvous::ServerOptions server_options,
                     Executor* executor)
      : server_options_(std::move(server_options)), server_(std::move(server)) {
    options.host_failover = [this](int port) { return HostAsSuccessor(port); };
    options.stop_hosting = [this] { StopHosting(); };
    options_ = std::move(options);
    client_ = std::make_unique<rendezvous::RendezvousClient>(options_, executor);
  }

  ~GrpcRendezvousImpl() override {
    client_.reset();  // the stream ends before the server goes; no failover call after this
    absl::MutexLock lock(&mu_);
    server_.reset();
  }

  void Join(const rendezvous::NodeInfo& node, rendezvous::RendezvousEvents* events)
      ABSL_LOCKS_EXCLUDED(mu_) override {
    {
      absl::MutexLock lock(&mu_);
      node_id_ = node.node_id;
      if (server_ != nullptr) server_->SetHostNodeId(node.node_id);
    }
    client_->Join(node, events);
  }
  void ReportGroupState(int64_t round, rendezvous::GroupState state,
                        const std::optional<rendezvous::WorkerFailure>& failure) override {
    client_->ReportGroupState(round, state, failure);
  }
  void ReportProgress(const std::vector<rendezvous::RankProgress>& progress, bool urgent) override {
    client_->ReportProgress(progress, urgent);
  }
  void ReportStep(const std::string& json) override { client_->ReportStep(json); }
  void ReportFigures(const rendezvous::NodeFigures& figures) override {
    client_->ReportFigures(figures);
  }
  void ReportPreflight(const rendezvous::PreflightReport& report) override {
    client_->ReportPreflight(report);
  }
  void Leave(const std::string& reason) override { client_->Leave(reason); }
  void StepOut(const std::string& reason) override { client_->StepOut(reason); }
  void StepIn() override { client_->StepIn(); }

  bool hosting() const ABSL_LOCKS_EXCLUDED(mu_) override {
    absl::MutexLock lock(&mu_);
    return server_ != nullptr;
  }

  int OtherAgents(const std::string& run_id) ABSL_LOCKS_EXCLUDED(mu_) override {
    rendezvous::ClientOptions query = options_;
    {
      absl::MutexLock lock(&mu_);
      if (server_ == nullptr) return 0;
      // A successor's server is on this host, not at the endpoint the agents were given.
      if (successor_) query.endpoint = FormatHostPort("127.0.0.1", server_->port());
    }
    query.host_failover = nullptr;
    query.rpc_timeout = std::chrono::milliseconds(1000);
    auto status = rendezvous::QueryRunStatus(query, run_id);
    if (!status.ok() || status->phase == rendezvous::RunPhase::kClosed) return 0;
    return static_cast<int>(status->members.size());  // after our own leave: the others
  }

 private:
  // On the client's thread: the agent that hosted the run is gone and this one is next.
  absl::Status HostAsSuccessor(int port) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (server_ != nullptr) return absl::OkStatus();  // already serving
    rendezvous::ServerOptions o = server_options_;
    o.port = port;
    auto started = rendezvous::RendezvousServer::Start(o);
    if (!started.ok()) return started.status();
    server_ = *std::move(started);
    successor_ = true;
    server_->SetHostNodeId(node_id_);
    LogInfo(absl::StrCat("hosting the rendezvous on ", server_->address(),
                         " (failover: the agent that hosted it is gone)"));
    return absl::OkStatus();
  }

  // On the client's thread: another server of the run went on while this one could not (the
  // two sides of a healed partition); the client joins that one. Late joiners then find the
  // run there too (this address refuses, MovedRunEndpoint asks the others).
  void StopHosting() ABSL_LOCKS_EXCLUDED(mu_) {
    std::unique_ptr<rendezvous::RendezvousServer> stopped;
    {
      absl::MutexLock lock(&mu_);
      stopped = std::move(server_);
      successor_ = false;
    }
    if (stopped != nullptr) {
      LogInfo(absl::StrCat("no longer hosting the rendezvous on ", stopped->address(),
                           " (another server of the run went on without it)"));
    }
  }

  const rendezvous::ServerOptions server_options_;
  mutable absl::Mutex mu_;
  std::unique_ptr<rendezvous::RendezvousServer> server_ ABSL_GUARDED_BY(mu_);
  std::string node_id_ ABSL_GUARDED_BY(mu_);
  bool successor_ ABSL_GUARDED_BY(mu_) = false;  // server_ was started by a failover
  rendezvous::ClientOptions options_;
  std::unique_ptr<rendezvous::RendezvousClient> client_;
};

// The run's preflight in `ddprun status --json`: its verdict on each node, with the summary line
// the server logged.
nlohmann::ordered_json PreflightJson(const rendezvous::PreflightSummary& summary) {
  nlohmann::ordered_json j;
  j["running"] = summary.running;
  j["took_s"] = summary.took_s;
  j["nodes"] = nlohmann::ordered_json::array();
  for (const rendezvous::PreflightVerdict& v : summary.verdicts) {
    nlohmann::ordered_json node;
    node["node_id"] = v.node_id;
    node["hostname"] = v.hostname;
    node["reported"] = v.reported;
    node["cpu_gflops"] = v.figures.cpu_gflops;
    node["send_mbps"] = v.figures.send_mbps;
    node["recv_mbps"] = v.figures.recv_mbps;
    node["rtt_ms"] = v.figures.rtt_ms;
    node["slow"] = v.slow();
    node["kept_out"] = v.kept_out;
    node["shortfalls"] = v.shortfalls;
    node["text"] = rendezvous::DescribeVerdict(v);
    j["nodes"].push_back(std::move(node));
  }
  return j;
}

// The run as the JSON object of `ddprun status --json` (status_command.h).
std::string RunStatusJson(const rendezvous::RunStatus& status) {
  nlohmann::ordered_json j;
  j["version"] = 1;
  j["run_id"] = status.run_id;
  j["phase"] = rendezvous::RunPhaseName(status.phase);
  j["round"] = status.round;
  j["min_nodes"] = status.min_nodes;
  j["max_nodes"] = status.max_nodes;
  j["restarts_used"] = status.restarts_used;
  j["max_restarts"] = status.max_restarts;
  j["close_message"] = status.close_message;
  j["spares"] = status.spares;
  j["spares_used"] = status.spares_used;
  j["slow_nodes"] = status.slow_nodes;
  if (const auto& a = status.checkpoint_advice) {
    nlohmann::ordered_json advice;
    advice["interval_s"] = a->interval_s;
    advice["mtbf_s"] = a->mtbf_s;
    advice["failures"] = a->failures;
    advice["trained_s"] = a->trained_s;
    advice["prior"] = a->prior;
    advice["save_s"] = a->save_s;
    advice["recovery_s"] = a->recovery_s;
    advice["predicted_ratio"] = a->predicted_ratio;
    if (a->measured_ratio.has_value()) advice["measured_ratio"] = *a->measured_ratio;
    advice["text"] = rendezvous::DescribeCheckpointAdvice(*a);
    j["checkpoint_advice"] = std::move(advice);
  }
  if (const auto& p = status.preflight) j["preflight"] = PreflightJson(*p);
  j["members"] = nlohmann::ordered_json::array();
  for (const auto& m : status.members) {
    nlohmann::ordered_json member;
    member["node_id"] = m.node_id;
    member["hostname"] = m.hostname;
    member["addr"] = m.addr;
    member["group_rank"] = m.group_rank;
    member["state"] = m.state;
    member["nproc_per_node"] = m.nproc_per_node;
    if (m.compute_ms > 0) {
      member["compute_ms"] = m.compute_ms;
      member["compute_ratio"] = m.compute_ratio;
      member["slow"] = m.slow;
    }
    j["members"].push_back(std::move(member));
  }
  return j.dump();
}

// The etcd backend behind the plugin's interface: it never hosts anything.
class EtcdRendezvousImpl final : public GrpcRendezvous {
 public:
  explicit EtcdRendezvousImpl(std::unique_ptr<rendezvous::EtcdRendezvous> impl)
      : impl_(std::move(impl)) {}
  void Join(const rendezvous::NodeInfo& node, rendezvous::RendezvousEvents* events) override {
    impl_->Join(node, events);
  }
  void ReportGroupState(int64_t round, rendezvous::GroupState state,
                        const std::optional<rendezvous::WorkerFailure>& failure) override {
    impl_->ReportGroupState(round, state, failure);
  }
  void ReportProgress(const std::vector<rendezvous::RankProgress>& progress, bool urgent) override {
    impl_->ReportProgress(progress, urgent);
  }
  void ReportFigures(const rendezvous::NodeFigures& figures) override {
    impl_->ReportFigures(figures);
  }
  void ReportPreflight(const rendezvous::PreflightReport& report) override {
    impl_->ReportPreflight(report);
  }
  void Leave(const std::string& reason) override { impl_->Leave(reason); }
  void StepOut(const std::string& reason) override { impl_->StepOut(reason); }
  void StepIn() override { impl_->StepIn(); }
  bool hosting() const override { return false; }
  int OtherAgents(const std::string&) override { return 0; }

 private:
  std::unique_ptr<rendezvous::EtcdRendezvous> impl_;
};

// The etcd password: from a file (first line) or $DDPRUN_ETCD_PASSWORD, never the command line.
absl::StatusOr<std::string> LoadEtcdPassword(const std::string& file) {
  if (file.empty()) {
    std::string env = ReadProcessVariable(kEtcdPasswordVariable);
    if (env.empty()) {
      return absl::InvalidArgumentError(
          "--rdzv-conf etcd_user needs a password: set DDPRUN_ETCD_PASSWORD or --rdzv-conf "
          "etcd_password_file=FILE");
    }
    return env;
  }
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line) || line.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rdzv-conf etcd_password_file=", file, ": cannot read a password from it"));
  }
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

absl::StatusOr<rendezvous::EtcdRendezvousOptions> EtcdOptionsFor(const EtcdSettings& s) {
  rendezvous::EtcdRendezvousOptions o;
  o.etcd.endpoints = s.endpoints;
  o.etcd.user = s.user;
  if (!s.user.empty()) {
    auto password = LoadEtcdPassword(s.password_file);
    if (!password.ok()) return password.status();
    o.etcd.password = *password;
  }
  o.etcd.tls.ca_file = s.tls_ca;
  o.etcd.tls.cert_file = s.tls_cert;
  o.etcd.tls.key_file = s.tls_key;
  o.etcd.tls.server_name_override = s.tls_server_name;
  o.etcd.tls.required = s.tls_required;
  o.prefix = s.prefix;
  o.timeouts = s.timeouts;
  o.read_timeout = s.read_timeout;
  if (s.close_timeout) o.close_timeout = *s.close_timeout;
  o.on_server_heard = s.on_server_heard;
  o.on_liveness_ack = s.on_liveness_ack;
  return o;
}

class PluginImpl final : public GrpcRendezvousPlugin {
 public:
  void SetVerbose(bool verbose) override { ::ddprun::SetVerbose(verbose); }
  absl::StatusOr<std::string> QueryEtcdRun(const EtcdSettings& s,
                                           const std::string& run_id) override {
    auto o = EtcdOptionsFor(s);
    if (!o.ok()) return o.status();
    auto client = rendezvous::EtcdClient::Create(o->etcd);
    if (!client.ok()) return client.status();
    auto status = rendezvous::QueryEtcdRunStatus(client->get(), o->prefix, run_id,
                                                 std::chrono::milliseconds(10000));
    if (!status.ok()) return status.status();
    return RunStatusJson(*status);
  }

  absl::StatusOr<std::unique_ptr<GrpcRendezvous>> CreateEtcd(const EtcdSettings& s,
                                                             Executor* executor) override {
    auto o = EtcdOptionsFor(s);
    if (!o.ok()) return o.status();
    auto impl = rendezvous::EtcdRendezvous::Create(*std::move(o), executor);
    if (!impl.ok()) return impl.status();
    return std::unique_ptr<GrpcRendezvous>(new EtcdRendezvousImpl(*std::move(impl)));
  }

  absl::StatusOr<std::unique_ptr<GrpcRendezvous>> Create(const C10dSettings& s,
                                                         Executor* executor) override {
    auto client = ClientOptionsFor(s);
    if (!client.ok()) return client.status();
    std::unique_ptr<rendezvous::RendezvousServer> server;
    const rendezvous::ServerOptions server_options =
        ServerOptionsFor(s, client->token, s.endpoint_port);
    const std::string moved = MovedRunEndpoint(s, *client);
    if (!moved.empty()) {
      LogInfo(absl::StrCat("run '", s.run_id, "' is served at ", moved, ", not at ",
                           client->endpoint,
                           " (it moved there when the agent that hosted it was lost): joining it "
                           "there"));
      client->endpoint = moved;
    }
    if (s.host_here && moved.empty() &&
        (s.must_host || !PortInUse(s.endpoint_host, s.endpoint_port))) {
      auto started = rendezvous::RendezvousServer::Start(server_options);
      if (started.ok()) {
        server = std::move(*started);
        LogInfo(absl::StrCat("hosting the rendezvous on ", server->address()));
        if (server->http_port() > 0) {
          LogInfo(absl::StrCat("serving /metrics and the status page on ",
                               FormatHostPort(s.http_host, server->http_port())));
        }
      } else if (s.must_host || started.status().code() != absl::StatusCode::kUnavailable) {
        return started.status();
      }
      // else: another process took the port between the check and the bind: join it.
    }
    return std::unique_ptr<GrpcRendezvous>(
        new GrpcRendezvousImpl(std::move(server), *std::move(client), server_options, executor));
  }

  absl::StatusOr<std::string> QueryRun(const C10dSettings& s, const std::string& run_id) override {
    auto client = ClientOptionsFor(s);
    if (!client.ok()) return client.status();
    C10dSettings asking = s;  // `ddprun status` hosts nothing: ask the first endpoint too
    asking.host_here = false;
    asking.run_id = run_id;
    if (std::string moved = MovedRunEndpoint(asking, *client); !moved.empty()) {
      client->endpoint = moved;
    }
    auto status = rendezvous::QueryRunStatus(*client, run_id);
    if (!status.ok()) return status.status();
    return RunStatusJson(*status);
  }
};

}  // namespace
}  // namespace ddprun::launcher

extern "C" __attribute__((visibility("default"))) ddprun::launcher::GrpcRendezvousPlugin*
DdprunGrpcRendezvousPlugin() {
  static auto* plugin = new ddprun::launcher::PluginImpl();
  return plugin;
}
