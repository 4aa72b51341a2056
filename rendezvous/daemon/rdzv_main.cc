// ddprun-rdzv: the rendezvous server as a standalone daemon, for a service node, so that no
// training node is a single point of failure. Binds loopback unless --host says otherwise.
//
//   DDPRUN_RDZV_TOKEN=... ddprun-rdzv --port 29400 --host 0.0.0.0
//
// Prints "ddprun-rdzv listening on HOST:PORT" once serving (with --port 0, the port picked),
// then with --http-port "ddprun-rdzv http on HOST:PORT" (/metrics and the status page).
// SIGTERM / SIGINT shut it down. Exit codes: 0 after a signal, 2 bad usage (flags, token and TLS
// files), 3 cannot serve (the port is taken).
//
//   ddprun-rdzv --token-file /etc/ddprun/token --mint-token alice
//
// prints alice's scoped token (rendezvous/grpc/scoped_token.h) and exits 0.
//
// At start it raises its soft limit of open files to the hard limit: every agent holds a
// connection, and a server out of descriptors can only hold new connections back.
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/kernel_version.h"
#include "common/log.h"
#include "common/strings.h"
#include "common/version.h"
#include "rendezvous/grpc/member_secret.h"
#include "rendezvous/grpc/rendezvous_server.h"
#include "rendezvous/grpc/scoped_token.h"
#include "rendezvous/grpc/security.h"

namespace {

// Soft RLIMIT_NOFILE up to the hard limit (Debian's soft default of 1024 is one large job).
void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  const rlim_t before = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  ddprun::LogInfo(absl::StrCat(
      "raised the open-file limit from ", before, " to ",
      limit.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(limit.rlim_max)));
}

// Everything the command line sets; the server's own options are filled in place.
struct DaemonFlags {
  ddprun::rendezvous::ServerOptions options;
  std::string token_file;
  std::string secret_file;
  std::string mint_scope;
  int http_port = -1;
  std::string http_host = "127.0.0.1";
  int64_t session_lifetime_s = 12 * 3600;
  double handshake_timeout_s = 10;
  bool quiet = false;
};

void AddServerFlags(CLI::App& app, DaemonFlags& f) {
  ddprun::rendezvous::ServerOptions& options = f.options;
  app.add_option("--host", options.host, "address to bind (default: loopback only)");
  app.add_option("--port", options.port, "port to bind; 0 picks a free one and prints it")
      ->check(CLI::Range(0, 65535));
  app.add_option("--token-file", f.token_file,
                 "file whose first line is the shared token (else $DDPRUN_RDZV_TOKEN)");
  app.add_option("--tls-cert", options.tls.cert_file, "PEM certificate chain (enables TLS)");
  app.add_option("--tls-key", options.tls.key_file, "PEM private key");
  app.add_option("--tls-client-ca", options.tls.client_ca_file,
                 "PEM CA bundle; clients must present a certificate it signed (mutual TLS)");
  app.add_option("--max-runs", options.limits.max_runs,
                 "open runs this server hosts at once (finished runs do not count; default 64)")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-runs-per-client", options.limits.max_runs_per_client,
                 "open runs one client address may start (default 16; 0: only --max-runs)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--secret-file", f.secret_file,
                 "file with the secret that member keys are made from (created 0600 with random "
                 "bytes if absent): re-registrations stay verifiable across restarts");
  app.add_option("--max-nodes-per-run", options.limits.max_nodes_per_run, "agents one run may have")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-message-bytes", options.max_receive_message_bytes,
                 "largest message accepted from an agent")
      ->check(CLI::Range(1024, 16 << 20));
}

void AddConnectionFlags(CLI::App& app, DaemonFlags& f) {
  app.add_option("--http-port", f.http_port,
                 "serve /metrics (Prometheus) and a status page on this port; 0 picks a free one "
                 "and prints it; off by default")
      ->check(CLI::Range(0, 65535));
  app.add_option("--http-host", f.http_host, "address of the HTTP side (default: loopback only)");
  app.add_option("--http-session-lifetime", f.session_lifetime_s,
                 "seconds a status-page login lasts (default 43200, 12 h)")
      ->check(CLI::Range(int64_t{1}, int64_t{30} * 24 * 3600));
  app.add_option("--handshake-timeout", f.handshake_timeout_s,
                 "seconds a connection may take to finish its TLS/HTTP2 handshake (default 10)")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--max-handshaking-connections", f.options.max_handshaking_per_address,
                 "connections kept from one source address (IPv4 address, IPv6 /64) within one "
                 "handshake timeout (default 1024); more from it are closed at once")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-connections-per-address", f.options.max_connections_per_address,
                 "connections open at once from one source address (default 0: half of the "
                 "open-file limit less a headroom); more from it are closed at once")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--mint-token", f.mint_scope,
                 "print the scoped token of this scope (a user, team or job: letters, digits, _ "
                 "and -) for the server's token, and exit: its holders reach only their scope's "
                 "runs");
  app.add_flag("--quiet", f.quiet, "log only warnings and errors, not rounds and restarts");
}

// Each loader logs why it failed and returns false.
bool LoadTokenInto(DaemonFlags& f) {
  absl::StatusOr<std::string> token = ddprun::rendezvous::LoadToken(f.token_file);
  if (!token.ok()) {
    ddprun::LogError(token.status().message());
    return false;
  }
  f.options.token = *token;
  return true;
}

bool LoadMemberSecretInto(DaemonFlags& f) {
  if (f.secret_file.empty()) {
    ddprun::LogWarning(
        "no --secret-file: after a restart of this server, re-registrations for the runs it "
        "lost cannot be verified and are accepted; a token holder who claims a run's nodes "
        "first takes their places and the real agents are then refused (exit 3)");
    return true;
  }
  absl::StatusOr<std::string> secret = ddprun::rendezvous::LoadOrCreateMemberSecret(f.secret_file);
  if (!secret.ok()) {
    ddprun::LogError(secret.status().message());
    return false;
  }
  f.options.limits.member_secret = *std::move(secret);
  return true;
}

int MintToken(const DaemonFlags& f) {
  absl::StatusOr<std::string> scoped =
      ddprun::rendezvous::MintScopedToken(f.options.token, f.mint_scope);
  if (!scoped.ok()) {
    ddprun::LogError(scoped.status().message());
    return 2;
  }
  std::cout << *scoped << std::endl;
  return 0;
}

// Serves until SIGTERM or SIGINT; the exit code.
int Serve(DaemonFlags& f) {
  // Signals are taken by sigwait on this thread; block them before gRPC starts its threads so
  // that none of those receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (f.http_port >= 0) {
    ddprun::rendezvous::HttpOptions http;
    http.host = f.http_host;
    http.port = f.http_port;
    http.session_lifetime = std::chrono::seconds(f.session_lifetime_s);
    f.options.http = http;
  }
  auto server = ddprun::rendezvous::RendezvousServer::Start(f.options);
  if (!server.ok()) {
    ddprun::LogError(server.status().message());
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 3;
  }
  std::cout << "ddprun-rdzv listening on " << (*server)->address() << std::endl;
  if ((*server)->http_port() > 0) {
    std::cout << "ddprun-rdzv http on "
              << ddprun::FormatHostPort(f.http_host, (*server)->http_port()) << std::endl;
  }

  int sig = 0;
  sigwait(&signals, &sig);
  ddprun::LogInfo(absl::StrCat(strsignal(sig), ": shutting down"));
  (*server)->Shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  DaemonFlags flags;
  CLI::App app{"ddprun-rdzv: the ddprun rendezvous server as a daemon"};
  app.set_version_flag("--version", absl::StrCat("ddprun-rdzv ", ddprun::kVersion));
  AddServerFlags(app, flags);
  AddConnectionFlags(app, flags);
  CLI11_PARSE(app, argc, argv);
  ddprun::SetLogTag("ddprun-rdzv");
  ddprun::SetVerbose(!flags.quiet);
  if (absl::Status kernel = ddprun::CheckKernelVersion(); !kernel.ok()) {
    ddprun::LogError(kernel.message());
    return 2;
  }
  // Debian's Abseil checks every Mutex acquisition for lock-order cycles (a debug aid that
  // costs a graph lookup per lock); the daemon's locks are short and never nested.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  flags.options.handshake_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(flags.handshake_timeout_s * 1000));

  if (!LoadTokenInto(flags)) return 2;
  if (!flags.mint_scope.empty()) return MintToken(flags);
  RaiseOpenFileLimit();
  if (flags.options.token.empty()) {
    ddprun::LogWarning(absl::StrCat("no token (", ddprun::rendezvous::kTokenEnv,
                                    " or --token-file): any client that reaches ",
                                    flags.options.host, " may join"));
  }
  if (!LoadMemberSecretInto(flags)) return 2;
  return Serve(flags);
}
