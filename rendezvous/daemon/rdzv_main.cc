// ddprun-rdzv: the rendezvous server as a standalone daemon, for a service node, so that no
// training node is a single point of failure. Binds loopback unless --host says otherwise.
//
//   DDPRUN_RDZV_TOKEN=... ddprun-rdzv --port 29400 --host 0.0.0.0
//
// Prints "ddprun-rdzv listening on HOST:PORT" once serving (with --port 0, the port picked),
// then with --http-port "ddprun-rdzv http on HOST:PORT" (/metrics and the status page).
// SIGTERM / SIGINT shut it down. Exit codes: 0 after a signal, 2 bad usage, 3 cannot serve.
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/log.h"
#include "common/strings.h"
#include "common/version.h"
#include "rendezvous/grpc/rendezvous_server.h"
#include "rendezvous/grpc/security.h"

int main(int argc, char** argv) {
  ddprun::rendezvous::ServerOptions options;
  std::string token_file;
  CLI::App app{"ddprun-rdzv: the ddprun rendezvous server as a daemon"};
  app.set_version_flag("--version", absl::StrCat("ddprun-rdzv ", ddprun::kVersion));
  app.add_option("--host", options.host, "address to bind (default: loopback only)");
  app.add_option("--port", options.port, "port to bind; 0 picks a free one and prints it")
      ->check(CLI::Range(0, 65535));
  app.add_option("--token-file", token_file,
                 "file whose first line is the shared token (else $DDPRUN_RDZV_TOKEN)");
  app.add_option("--tls-cert", options.tls.cert_file, "PEM certificate chain (enables TLS)");
  app.add_option("--tls-key", options.tls.key_file, "PEM private key");
  app.add_option("--tls-client-ca", options.tls.client_ca_file,
                 "PEM CA bundle; clients must present a certificate it signed (mutual TLS)");
  app.add_option("--max-runs", options.limits.max_runs, "runs this server hosts at once")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-nodes-per-run", options.limits.max_nodes_per_run, "agents one run may have")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-message-bytes", options.max_receive_message_bytes,
                 "largest message accepted from an agent")
      ->check(CLI::Range(1024, 16 << 20));
  int http_port = -1;
  std::string http_host = "127.0.0.1";
  app.add_option("--http-port", http_port,
                 "serve /metrics (Prometheus) and a status page on this port; 0 picks a free one "
                 "and prints it; off by default")
      ->check(CLI::Range(0, 65535));
  app.add_option("--http-host", http_host, "address of the HTTP side (default: loopback only)");
  bool quiet = false;
  app.add_flag("--quiet", quiet, "log only warnings and errors, not rounds and restarts");
  CLI11_PARSE(app, argc, argv);
  ddprun::SetLogTag("ddprun-rdzv");
  ddprun::SetVerbose(!quiet);
  // Debian's Abseil checks every Mutex acquisition for lock-order cycles (a debug aid that
  // costs a graph lookup per lock); the daemon's locks are short and never nested.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  absl::StatusOr<std::string> token = ddprun::rendezvous::LoadToken(token_file);
  if (!token.ok()) {
    ddprun::LogError(token.status().message());
    return 2;
  }
  options.token = *token;
  if (options.token.empty()) {
    ddprun::LogWarning(absl::StrCat("no token (", ddprun::rendezvous::kTokenEnv,
                                    " or --token-file): any client that reaches ", options.host,
                                    " may join"));
  }

  // Signals are taken by sigwait on this thread; block them before gRPC starts its threads so
  // that none of those receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (http_port >= 0) {
    ddprun::rendezvous::HttpOptions http;
    http.host = http_host;
    http.port = http_port;
    options.http = http;
  }
  auto server = ddprun::rendezvous::RendezvousServer::Start(options);
  if (!server.ok()) {
    ddprun::LogError(server.status().message());
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 3;
  }
  std::cout << "ddprun-rdzv listening on " << (*server)->address() << std::endl;
  if ((*server)->http_port() > 0) {
    std::cout << "ddprun-rdzv http on " << ddprun::FormatHostPort(http_host, (*server)->http_port())
              << std::endl;
  }

  int sig = 0;
  sigwait(&signals, &sig);
  ddprun::LogInfo(absl::StrCat(strsignal(sig), ": shutting down"));
  (*server)->Shutdown();
  return 0;
}
