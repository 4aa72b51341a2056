#include "launcher/status_command.h"

#include <CLI/CLI.hpp>
#include <functional>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "launcher/agent_state.h"
#include "launcher/cli.h"
#include "launcher/grpc_rendezvous_plugin.h"
#include "launcher/rendezvous_setup.h"

namespace ddprun::launcher {

namespace {

// Settings errors are usage errors (exit 2); a missing plugin or a rendezvous that cannot be
// reached or refuses is a rendezvous failure (exit 3).
int PrintRun(const LaunchOptions& options, const absl::Status& settings,
             const std::function<absl::StatusOr<std::string>(GrpcRendezvousPlugin*)>& describe) {
  if (!settings.ok()) {
    WriteAll(2, absl::StrCat("ddprun status: error: ", settings.message(), "\n"));
    return kExitUsage;
  }
  auto plugin = LoadGrpcRendezvousPlugin();
  if (!plugin.ok()) {
    WriteAll(2, absl::StrCat("ddprun status: error: ", plugin.status().message(), "\n"));
    return kExitRendezvous;
  }
  auto text = describe(*plugin);
  if (!text.ok()) {
    WriteAll(2, absl::StrCat("ddprun status: ", options.rdzv_endpoint, ": ",
                             text.status().message(), "\n"));
    return kExitRendezvous;
  }
  WriteAll(1, *text);
  return 0;
}

}  // namespace

int RunStatusCommand(const std::vector<std::string>& args, const HostInfo& host) {
  CLI::App app("ddprun status: show a run of the c10d or etcd rendezvous");
  LaunchOptions options;
  options.rdzv_backend = "c10d";
  std::string conf;
  app.add_option("--rdzv-backend,--rdzv_backend", options.rdzv_backend, "c10d (default) or etcd")
      ->check(CLI::IsMember({"c10d", "etcd", "etcd-v3"}));
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", options.rdzv_endpoint)->required();
  app.add_option("--rdzv-id,--rdzv_id", options.rdzv_id)->required();
  app.add_option("--rdzv-conf,--rdzv_conf", conf, "token_file=..., tls_ca=..., read_timeout=S");
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    WriteAll(1, app.help());
    return 0;
  } catch (const CLI::ParseError& e) {
    WriteAll(2, absl::StrCat("ddprun status: error: ", e.what(), "\n"));
    return kExitUsage;
  }
  if (!conf.empty()) {
    // The agent's own --rdzv-conf parser, so both read the value the same way.
    auto parsed = ParseCommandLine({"--rdzv-conf=" + conf, "--no-python", "true"},
                                   {{"PATH", "/bin:/usr/bin"}}, host);
    if (!parsed.ok()) {
      WriteAll(2, absl::StrCat("ddprun status: error: ", parsed.status().message(), "\n"));
      return kExitUsage;
    }
    options.rdzv_conf = parsed->options.rdzv_conf;
  }
  if (options.rdzv_backend != "c10d") {
    auto settings = MakeEtcdSettings(options);
    return PrintRun(options, settings.status(), [&](GrpcRendezvousPlugin* plugin) {
      return plugin->DescribeEtcdRun(*settings, options.rdzv_id);
    });
  }
  auto settings = MakeC10dSettings(options, host);
  if (settings.ok()) settings->host_here = false;
  return PrintRun(options, settings.status(), [&](GrpcRendezvousPlugin* plugin) {
    return plugin->DescribeRun(*settings, options.rdzv_id);
  });
}

}  // namespace ddprun::launcher
