#include "launcher/rdzv/rendezvous_setup.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <unistd.h>

#include <cerrno>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "launcher/rdzv/local_rendezvous.h"
#include "launcher/rdzv/static_rendezvous.h"

namespace ddprun::launcher {
namespace {

// The numeric text of an IPv4 or IPv6 socket address; empty for other families.
std::string AddressText(const sockaddr* addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, buf, sizeof(buf));
  } else if (addr->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

std::set<std::string> LocalAddresses() {
  std::set<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    std::string text = AddressText(a->ifa_addr);
    if (!text.empty()) out.insert(std::move(text));
  }
  freeifaddrs(list);
  return out;
}

// The run's timeouts as --rdzv-conf gave them, with the one default that depends on the restart
// mode: in-process survivors re-form at once after a failure (no last call, unless
// failure_last_call_timeout says otherwise), because a node that comes back later costs them
// only one more cheap re-formation, while waiting for it idles every survivor.
rendezvous::RunTimeouts TimeoutsFor(const RdzvConf& conf, const LaunchOptions& options) {
  rendezvous::RunTimeouts t = conf.timeouts;
  // auto for a multi-node run: the path runs, and a silence loses a member only while a spare
  // can take its place (design §3a); with one node there is nobody to tell.
  t.liveness.mode = conf.liveness.value_or(options.max_nodes > 1 ? rendezvous::LivenessMode::kAuto
                                                                 : rendezvous::LivenessMode::kOff);
  t.slow_nodes.evict = options.evict_slow;
  t.preflight.enabled = PreflightEnabled(options);
  t.preflight.margin = options.preflight_margin;
  if (!t.failure_last_call_timeout && options.restart_mode == RestartMode::kInProcess) {
    t.failure_last_call_timeout = Duration::zero();
  }
  return t;
}

// What the c10d and static settings take from --rdzv-conf alike: token, TLS, timeouts, the
// page. After the endpoint and hosting are decided (a hosting agent's TLS needs a certificate).
absl::Status TakeConf(const RdzvConf& conf, const LaunchOptions& options, C10dSettings* s) {
  s->token_file = conf.token_file;
  s->tls_cert = conf.tls_cert;
  s->tls_key = conf.tls_key;
  s->tls_ca = conf.tls_ca;
  s->tls_client_ca = conf.tls_client_ca;
  s->tls_server_name = conf.tls_server_name;
  s->tls_required = conf.protocol == RdzvProtocol::kHttps;
  if (s->tls_cert.empty() != s->tls_key.empty()) {
    return absl::InvalidArgumentError("--rdzv-conf: tls_cert and tls_key go together");
  }
  if (s->tls_required && s->host_here && s->tls_cert.empty()) {
    return absl::InvalidArgumentError(
        "--rdzv-conf protocol=https: this agent hosts the rendezvous server, which then needs "
        "tls_cert and tls_key");
  }
  s->timeouts = TimeoutsFor(conf, options);
  s->read_timeout = conf.read_timeout;
  s->close_timeout = conf.close_timeout;
  s->http_port = conf.http_port;
  s->http_host = conf.http_host;
  return absl::OkStatus();
}

}  // namespace

bool PreflightEnabled(const LaunchOptions& options) {
  // Where nobody compares the nodes: one node, each static node on its own. (On etcd the agent
  // that coordinates the run does, as the server would.)
  const bool no_server =
      options.standalone || (options.rdzv_backend == RdzvBackend::kStatic &&
                             options.rdzv.static_coordination != StaticCoordination::kRendezvous);
  if (no_server) return false;
  return options.preflight == PreflightMode::kOn ||
         (options.preflight == PreflightMode::kAuto && options.max_nodes > 1);
}

bool IsLocalHost(const std::string& host, const HostInfo& info) {
  const std::string h = absl::AsciiStrToLower(host);
  if (h == "localhost" || absl::StartsWith(h, "127.") || h == "::1" ||
      h == absl::AsciiStrToLower(info.hostname)) {
    return true;
  }
  const std::set<std::string> local = LocalAddresses();
  if (local.count(h) > 0) return true;
  // A name: resolve it and compare addresses.
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  bool found = false;
  for (addrinfo* a = res; a != nullptr && !found; a = a->ai_next) {
    const std::string text = AddressText(a->ai_addr);
    found = local.count(text) > 0 || absl::StartsWith(text, "127.");
  }
  freeaddrinfo(res);
  return found;
}

absl::StatusOr<C10dSettings> MakeC10dSettings(const LaunchOptions& options, const HostInfo& host) {
  const std::vector<std::string> listed =
      absl::StrSplit(options.rdzv_endpoint, ',', absl::SkipEmpty());
  if (listed.empty()) {
    return absl::InvalidArgumentError("--rdzv-backend=c10d needs --rdzv-endpoint=HOST[:PORT]");
  }
  const RdzvConf& conf = options.rdzv;  // parsed and checked with the command line
  DDPRUN_ASSIGN_OR_RETURN(HostPort endpoint,
                          ParseHostPort("--rdzv-endpoint", listed[0], kDefaultRdzvPort));
  C10dSettings s;
  s.run_id = options.rdzv_id;
  s.endpoint_host = endpoint.host;
  s.endpoint_port = endpoint.port;
  // The others default to the first one's port: a successor serves on it at its own address.
  for (size_t i = 1; i < listed.size(); ++i) {
    DDPRUN_ASSIGN_OR_RETURN(HostPort other,
                            ParseHostPort("--rdzv-endpoint", listed[i], endpoint.port));
    s.other_endpoints.push_back(FormatHostPort(other.host, other.port));
  }
  s.must_host = conf.is_host.value_or(false);
  s.host_here = conf.is_host.value_or(IsLocalHost(endpoint.host, host));
  DDPRUN_RETURN_IF_ERROR(TakeConf(conf, options, &s));
  return s;
}

absl::StatusOr<C10dSettings> MakeStaticSettings(const LaunchOptions& options) {
  const RdzvConf& conf = options.rdzv;  // parsed and checked with the command line
  C10dSettings s;
  s.run_id = options.rdzv_id;
  s.endpoint_host = options.master_addr;
  s.endpoint_port = conf.static_port.value_or(options.master_port + 1);
  if (s.endpoint_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--master-port=", options.master_port,
                     ": the static rendezvous listens on MASTER_PORT + 1, "
                     "which is no port; choose another with --rdzv-conf static_port=PORT"));
  }
  if (s.endpoint_port == options.master_port) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rdzv-conf static_port=", s.endpoint_port,
                     ": the job's store listens there (--master-port)"));
  }
  // Node 0 hosts, whatever the addresses say (tests run every node on one host); its return is
  // awaited after a loss, since the job's store (node 0's agent's) is at MASTER_ADDR too.
  s.host_here = s.must_host = options.node_rank == 0;
  s.host_loss = rendezvous::HostLoss::kAwaitReturn;
  DDPRUN_RETURN_IF_ERROR(TakeConf(conf, options, &s));
  return s;
}

absl::StatusOr<EtcdSettings> MakeEtcdSettings(const LaunchOptions& options) {
  if (options.rdzv_endpoint.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rdzv-backend=", RdzvBackendName(options.rdzv_backend),
                     " needs --rdzv-endpoint=HOST:PORT[,HOST:PORT...]"));
  }
  const RdzvConf& conf = options.rdzv;  // parsed and checked with the command line
  EtcdSettings s;
  for (absl::string_view part : absl::StrSplit(options.rdzv_endpoint, ',', absl::SkipEmpty())) {
    DDPRUN_ASSIGN_OR_RETURN(HostPort endpoint, ParseHostPort("--rdzv-endpoint", part, 2379));
    s.endpoints.push_back(FormatHostPort(endpoint.host, endpoint.port));
  }
  if (!conf.etcd_prefix.empty()) {
    if (conf.etcd_prefix.front() != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("--rdzv-conf etcd_prefix=", conf.etcd_prefix, ": must start with '/'"));
    }
    s.prefix = conf.etcd_prefix;
  }
  s.user = conf.etcd_user;
  s.password_file = conf.etcd_password_file;
  s.tls_cert = conf.tls_cert;
  s.tls_key = conf.tls_key;
  s.tls_ca = conf.tls_ca;
  s.tls_server_name = conf.tls_server_name;
  s.tls_required = conf.protocol == RdzvProtocol::kHttps;
  if (s.tls_cert.empty() != s.tls_key.empty()) {
    return absl::InvalidArgumentError("--rdzv-conf: tls_cert and tls_key go together");
  }
  s.timeouts = TimeoutsFor(conf, options);
  s.read_timeout = conf.read_timeout;
  s.close_timeout = conf.close_timeout;
  return s;
}

namespace {

// The store on a port of this agent's choosing (--master-port not given), or on the given one,
// which must be free now, not when a worker fails on it.
absl::StatusOr<std::unique_ptr<store::StoreServer>> StartStore(const LaunchOptions& options,
                                                               bool given_port) {
  store::StoreServerOptions o;
  o.port = given_port ? options.master_port : 0;
  absl::StatusOr<std::unique_ptr<store::StoreServer>> s = store::StoreServer::Start(o);
  if (s.ok() || !given_port) return s;
  return absl::InvalidArgumentError(absl::StrCat("--master-port=", options.master_port,
                                                 ": cannot serve the job's store there (",
                                                 s.status().message(), ")"));
}

// Static jobs of several nodes: node 0's agent serves the store at --master-port, the others
// none (their workers use node 0's).
absl::StatusOr<std::unique_ptr<store::StoreServer>> StartStaticStore(const LaunchOptions& options) {
  if (options.node_rank != 0) return std::unique_ptr<store::StoreServer>();
  return StartStore(options, /*given_port=*/true);
}

// The local lease of a c10d or etcd agent (launcher/fence/local_lease.h), renewed by what the
// backend's `settings` report: the server's (or etcd's) answers, and the liveness acks.
template <typename Settings>
absl::StatusOr<std::unique_ptr<fence::LocalLease>> CreateLocalLease(
    const rendezvous::RunTimeouts& timeouts, Settings* settings) {
  std::optional<Duration> liveness_length;
  if (timeouts.liveness.on()) liveness_length = fence::LeaseLength(timeouts);
  DDPRUN_ASSIGN_OR_RETURN(
      std::unique_ptr<fence::LocalLease> lease,
      fence::LocalLease::Create(fence::StreamLeaseLength(timeouts), liveness_length));
  settings->on_server_heard = [lease = lease.get()](TimePoint heard_from) {
    lease->Renew(heard_from, fence::Voucher::kStream);
  };
  settings->on_liveness_ack = [lease = lease.get()](TimePoint heard_from,
                                                    rendezvous::SilenceVerdict offered) {
    lease->Renew(heard_from, offered == rendezvous::SilenceVerdict::kBySilence
                                 ? fence::Voucher::kLivenessBySilence
                                 : fence::Voucher::kLivenessByLease);
  };
  return lease;
}

absl::StatusOr<RendezvousSetup> SetUpStaticCoordinated(const LaunchOptions& options,
                                                       Executor* executor) {
  DDPRUN_ASSIGN_OR_RETURN(C10dSettings settings, MakeStaticSettings(options));
  LogInfo(absl::StrCat("static rendezvous: node ", options.node_rank, " of ", options.max_nodes,
                       ", coordinated through the rendezvous ",
                       options.node_rank == 0 ? "this agent hosts at " : "of node 0 at ",
                       FormatHostPort(settings.endpoint_host, settings.endpoint_port),
                       " (--rdzv-conf static_coordination=none: each node on its own)"));
  DDPRUN_ASSIGN_OR_RETURN(GrpcRendezvousPlugin * plugin, LoadGrpcRendezvousPlugin());
  DDPRUN_ASSIGN_OR_RETURN(std::unique_ptr<GrpcRendezvous> grpc, plugin->Create(settings, executor));
  RendezvousSetup setup;
  DDPRUN_ASSIGN_OR_RETURN(setup.store, StartStaticStore(options));
  setup.run_id = options.rdzv_id;
  setup.grpc = grpc.get();
  setup.rendezvous =
      std::make_unique<StaticRendezvous>(std::move(grpc), options.master_addr, options.master_port);
  return setup;
}

}  // namespace

absl::StatusOr<RendezvousSetup> SetUpRendezvous(const LaunchOptions& options, const HostInfo& host,
                                                Executor* executor) {
  RendezvousSetup setup;
  LocalRendezvousOptions local;
  local.max_restarts = options.max_restarts;
  if (options.standalone) {
    setup.run_id = RandomHex(16);
    DDPRUN_ASSIGN_OR_RETURN(setup.store, StartStore(options, /*given_port=*/false));
    local.master_addr = "127.0.0.1";
    local.master_port = setup.store->port();
    setup.rendezvous = std::make_unique<LocalRendezvous>(executor, local);
    return setup;
  }
  if (options.rdzv_backend == RdzvBackend::kStatic && options.max_nodes > 1 &&
      options.rdzv.static_coordination == StaticCoordination::kRendezvous) {
    return SetUpStaticCoordinated(options, executor);
  }
  if (options.rdzv_backend == RdzvBackend::kStatic) {
    setup.run_id = options.rdzv_id;
    local.node_rank = options.node_rank;
    local.nnodes = options.max_nodes;
    local.master_addr = options.master_addr;
    local.master_port = options.master_port;
    if (options.max_nodes == 1) {
      // One node: no fixed 29500, so that any number of jobs can share a machine (torch 2.12
      // does the same): the store on a free port, as --standalone does, unless one is given.
      DDPRUN_ASSIGN_OR_RETURN(setup.store, StartStore(options, options.master_port_given));
      local.master_port = setup.store->port();
    } else {
      DDPRUN_ASSIGN_OR_RETURN(setup.store, StartStaticStore(options));
    }
    setup.rendezvous = std::make_unique<LocalRendezvous>(executor, local);
    return setup;
  }
  if (IsEtcd(options.rdzv_backend)) {
    DDPRUN_ASSIGN_OR_RETURN(EtcdSettings settings, MakeEtcdSettings(options));
    setup.run_id = options.rdzv_id;
    DDPRUN_ASSIGN_OR_RETURN(setup.lease, CreateLocalLease(settings.timeouts, &settings));
    DDPRUN_ASSIGN_OR_RETURN(setup.store, StartStore(options, /*given_port=*/false));
    DDPRUN_ASSIGN_OR_RETURN(GrpcRendezvousPlugin * plugin, LoadGrpcRendezvousPlugin());
    DDPRUN_ASSIGN_OR_RETURN(std::unique_ptr<GrpcRendezvous> etcd,
                            plugin->CreateEtcd(settings, executor));
    setup.grpc = etcd.get();
    setup.rendezvous = std::move(etcd);
    return setup;
  }
  DDPRUN_ASSIGN_OR_RETURN(C10dSettings settings, MakeC10dSettings(options, host));
  setup.run_id = options.rdzv_id;
  DDPRUN_ASSIGN_OR_RETURN(setup.lease, CreateLocalLease(settings.timeouts, &settings));
  // This agent's store, used when this node holds group rank 0 (its port is announced in the
  // join).
  DDPRUN_ASSIGN_OR_RETURN(setup.store, StartStore(options, /*given_port=*/false));
  DDPRUN_ASSIGN_OR_RETURN(GrpcRendezvousPlugin * plugin, LoadGrpcRendezvousPlugin());
  DDPRUN_ASSIGN_OR_RETURN(std::unique_ptr<GrpcRendezvous> grpc, plugin->Create(settings, executor));
  setup.grpc = grpc.get();
  setup.rendezvous = std::move(grpc);
  return setup;
}

}  // namespace ddprun::launcher
