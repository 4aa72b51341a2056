// The --rdzv-conf keys ddprun knows (torchrun's and its own), parsed once, at option parsing
// (cli.h), so that a bad value is a usage error naming the key before anything starts; the
// result travels in LaunchOptions::rdzv to the rendezvous setup (launcher/rdzv), the agent and
// `ddprun status`. Pure.
#ifndef DDPRUN_LAUNCHER_CONFIG_RDZV_CONF_H_
#define DDPRUN_LAUNCHER_CONFIG_RDZV_CONF_H_

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rendezvous/api/run_config.h"

namespace ddprun::launcher {

// torchrun's etcd `protocol` key. https asks for TLS even without a CA file: the default roots
// (the system's, or $GRPC_DEFAULT_SSL_ROOTS_FILE_PATH) then verify the server, as python-etcd
// does. kUnset: TLS exactly when a CA or certificate file is given.
enum class RdzvProtocol { kUnset, kHttp, kHttps };

// How the nodes of a static multi-node job (--rdzv-backend=static, or a platform's environment)
// coordinate. kRendezvous: through a c10d rendezvous that node 0's agent hosts at MASTER_ADDR
// (one restart budget, every node restarted together, a lost node noticed within its lease).
// kNone: each node on its own, as torchrun does (its workers' broken connections are the only
// news of a peer's failure).
enum class StaticCoordination { kRendezvous, kNone };

// Bad values and a lease beyond kMaxSeconds are kInvalidArgument naming them. Unknown keys are
// no error, as under torchrun (its backends ignore what they do not read): they are listed in
// unknown_keys for one warning each (UnknownKeyWarning).
// torchrun's etcd TLS keys are read as ddprun's: cacert and ca_cert as tls_ca, cert and ssl_cert
// as tls_cert, key and ssl_cert_key as tls_key (its etcd and etcd-v2 backends name them so).
struct RdzvConf {
  rendezvous::RunTimeouts timeouts;
  std::chrono::milliseconds read_timeout{60000};
  // How long leaving the rendezvous may take at the end (the last status, the goodbye); unset:
  // the backend's own bound (2 s for c10d, 3 s for etcd).
  std::optional<std::chrono::milliseconds> close_timeout;
  std::optional<bool> is_host;
  std::string token_file;
  std::string tls_cert, tls_key, tls_ca, tls_client_ca, tls_server_name;
  RdzvProtocol protocol = RdzvProtocol::kUnset;
  std::string etcd_prefix, etcd_user, etcd_password_file;  // --rdzv-backend=etcd
  // The embedded server's /metrics and status page (as ddprun-rdzv --http-port/--http-host).
  std::optional<int> http_port;
  std::string http_host = "127.0.0.1";
  // --rdzv-backend=static with more than one node.
  StaticCoordination static_coordination = StaticCoordination::kRendezvous;
  std::optional<int> static_port;  // unset: MASTER_PORT + 1
  // liveness=off|auto|on as given; unset: auto for a multi-node c10d or static run, off for one
  // node and for etcd (TimeoutsFor in rendezvous_setup.cc). timeouts.liveness.mode is the
  // resolved value the rendezvous uses.
  std::optional<rendezvous::LivenessMode> liveness;
  std::vector<std::string> unknown_keys;  // given, not read by ddprun
  // The key=value pairs as given (merged over the sources, the strongest last), for messages
  // that quote them; the settings are the fields above.
  std::map<std::string, std::string> given;
};
absl::StatusOr<RdzvConf> ParseRdzvConf(const std::map<std::string, std::string>& conf);
// The warning for a key ddprun does not read: names it and the keys it does read.
std::string UnknownKeyWarning(const std::string& key, const std::string& value);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONFIG_RDZV_CONF_H_
