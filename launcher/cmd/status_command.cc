#include "launcher/cmd/status_command.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/strings.h"
#include "launcher/agent/state/agent_state.h"
#include "launcher/config/cli.h"
#include "launcher/rdzv/rendezvous_setup.h"
#include "rendezvous/api/grpc_rendezvous_plugin.h"

namespace ddprun::launcher {

namespace {

// How one query came out: the run's JSON, or the exit code and message of a failure.
struct Query {
  std::optional<nlohmann::json> run;
  int exit_code = 0;
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string error;
};

using QueryFn = std::function<absl::StatusOr<std::string>(GrpcRendezvousPlugin*)>;

// Bounds of --interval, in seconds.
constexpr double kMinInterval = 0.05;
constexpr double kMaxInterval = 3600;

// Settings errors are usage errors (exit 2); a missing plugin or a rendezvous that cannot be
// reached or refuses is a rendezvous failure (exit 3).
Query QueryOnce(const LaunchOptions& options, const absl::Status& settings, const QueryFn& query) {
  Query q;
  if (!settings.ok()) {
    q.exit_code = kExitUsage;
    q.error = absl::StrCat("ddprun status: error: ", settings.message());
    return q;
  }
  auto plugin = LoadGrpcRendezvousPlugin();
  if (!plugin.ok()) {
    q.exit_code = kExitRendezvous;
    q.error = absl::StrCat("ddprun status: error: ", plugin.status().message());
    return q;
  }
  auto text = query(*plugin);
  if (!text.ok()) {
    q.exit_code = kExitRendezvous;
    q.code = text.status().code();
    q.error = absl::StrCat("ddprun status: ", options.rdzv_endpoint, ": ", text.status().message());
    return q;
  }
  q.run = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (q.run->is_discarded()) {
    q.run.reset();
    q.exit_code = kExitRendezvous;
    q.error = "ddprun status: the rendezvous plugin answered something that is not JSON";
  }
  return q;
}

void Show(const nlohmann::json& run, bool json, bool redraw) {
  if (json) {
    WriteAll(1, absl::StrCat(run.dump(), "\n"));
    return;
  }
  // On a terminal --watch redraws in place (cursor home, clear); elsewhere frames follow.
  WriteAll(1, absl::StrCat(redraw ? "\x1b[H\x1b[2J" : "", FormatRunStatusText(run)));
}

int Watch(const LaunchOptions& options, const absl::Status& settings, const QueryFn& query,
          bool json, std::chrono::milliseconds interval) {
  const bool redraw = !json && isatty(1);
  bool seen = false;
  for (;;) {
    Query q = QueryOnce(options, settings, query);
    if (q.run.has_value()) {
      seen = true;
      Show(*q.run, json, redraw);
      if (q.run->value("phase", "") == "closed") return 0;
    } else if (!seen || q.exit_code == kExitUsage) {
      WriteAll(2, absl::StrCat(q.error, "\n"));
      return q.exit_code;
    } else if (q.code == absl::StatusCode::kNotFound) {
      // The run closed and is forgotten (etcd: its last agent removed its keys).
      WriteAll(2, absl::StrCat("ddprun status: run '", options.rdzv_id,
                               "' is over: the rendezvous no longer knows it\n"));
      return 0;
    } else {
      // The server may be restarting: say so and keep watching.
      WriteAll(2, absl::StrCat(q.error, " (still watching)\n"));
    }
    if (!json && !redraw) WriteAll(1, "\n");
    std::this_thread::sleep_for(interval);
  }
}

}  // namespace

namespace {

// "  compute 95.0 ms/step (3.05x the median node) SLOW", or empty (no figures).
std::string ComputeText(const nlohmann::json& member) {
  const double ms = member.value("compute_ms", 0.0);
  if (!(ms > 0)) return "";
  const double ratio = member.value("compute_ratio", 0.0);
  return absl::StrFormat("  compute %.1f ms/step%s%s", ms,
                         ratio > 0 ? absl::StrFormat(" (%.2fx the median node)", ratio) : "",
                         member.value("slow", false) ? " SLOW" : "");
}

}  // namespace

std::string FormatRunStatusText(const nlohmann::json& run) {
  // Every string shown came from the server, and from agents and workers before it: one line
  // each, terminal escapes shown rather than obeyed (Printable).
  auto text = [](const nlohmann::json& object, const char* key) {
    return Printable(object.value(key, ""));
  };
  std::string out = absl::StrCat(
      "run ", text(run, "run_id"), ": ", text(run, "phase"), ", round ", run.value("round", 0),
      ", nodes ", run.value("min_nodes", 0), ":", run.value("max_nodes", 0), ", restarts used ",
      run.value("restarts_used", 0), " of ", run.value("max_restarts", 0),
      run.value("spares", 0) > 0 || run.value("spares_used", 0) > 0
          ? absl::StrCat(", spares ", run.value("spares", 0), " (used ",
                         run.value("spares_used", 0), ")")
          : std::string(),
      run.value("slow_nodes", 0) > 0 ? absl::StrCat(", slow nodes ", run.value("slow_nodes", 0))
                                     : std::string(),
      "\n");
  const std::string closed = text(run, "close_message");
  if (!closed.empty()) absl::StrAppend(&out, "closed: ", closed, "\n");
  if (run.contains("checkpoint_advice") && run["checkpoint_advice"].is_object()) {
    absl::StrAppend(&out, text(run["checkpoint_advice"], "text"), "\n");
  }
  if (run.contains("preflight") && run["preflight"].is_object()) {
    const nlohmann::json& preflight = run["preflight"];
    if (preflight.value("running", false)) {
      absl::StrAppend(&out, "preflight: measuring the nodes\n");
    } else {
      absl::StrAppend(&out, "preflight (", absl::StrFormat("%.2f", preflight.value("took_s", 0.0)),
                      " s):\n");
      for (const auto& node : preflight.value("nodes", nlohmann::json::array())) {
        // The node id too: nodes of one host (a test, a node per GPU set) share its name.
        absl::StrAppend(&out, "  ", text(node, "hostname"), "  ", text(node, "node_id"), "  ",
                        text(node, "text"), "\n");
      }
    }
  }
  for (const auto& m : run.value("members", nlohmann::json::array())) {
    const int group_rank = m.value("group_rank", -1);
    const std::string state = text(m, "state");
    absl::StrAppend(&out, "  ",
                    group_rank >= 0        ? absl::StrCat("node rank ", group_rank)
                    : state == "spare"     ? std::string("spare      ")
                    : state == "set aside" ? std::string("set aside  ")
                                           : std::string("waiting    "),
                    "  ", text(m, "hostname"), "  ", text(m, "addr"), "  nproc ",
                    m.value("nproc_per_node", 0), "  ", text(m, "state"), "  ", text(m, "node_id"),
                    ComputeText(m), "\n");
  }
  return out;
}

int RunStatusCommand(const std::vector<std::string>& args, const HostInfo& host) {
  CLI::App app("ddprun status: show a run of the c10d or etcd rendezvous");
  LaunchOptions options;
  std::string backend = "c10d";
  std::string conf;
  app.add_option("--rdzv-backend,--rdzv_backend", backend, "c10d (default) or etcd")
      ->check(CLI::IsMember({"c10d", "etcd", "etcd-v3"}));
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", options.rdzv_endpoint)->required();
  app.add_option("--rdzv-id,--rdzv_id", options.rdzv_id)->required();
  app.add_option("--rdzv-conf,--rdzv_conf", conf, "token_file=..., tls_ca=..., read_timeout=S");
  bool json = false;
  bool watch = false;
  double interval_s = 1.0;
  app.add_flag("--json", json, "one JSON object (fields: docs/guide/watching.md)");
  app.add_flag("--watch", watch, "show the run again every --interval seconds until it closes");
  CLI::Option* interval_option =
      app.add_option("--interval", interval_s,
                     absl::StrCat("seconds between two --watch queries, ", kMinInterval, " to ",
                                  kMaxInterval, " (default 1)"));
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
  // Checked here rather than with CLI::Range, which lets NaN through (every comparison with it
  // is false), and --watch then polled without pause.
  if (!(interval_s >= kMinInterval && interval_s <= kMaxInterval)) {
    WriteAll(2,
             absl::StrCat("ddprun status: error: --interval=", interval_option->results().front(),
                          ": must be a number of seconds from ", kMinInterval, " to ", kMaxInterval,
                          "\n"));
    return kExitUsage;
  }
  options.rdzv_backend = *ParseRdzvBackend(backend);  // one of the names IsMember allows
  if (!conf.empty()) {
    // The agent's own --rdzv-conf parser, so both read the value the same way.
    auto parsed = ParseCommandLine({"--rdzv-conf=" + conf, "--no-python", "true"},
                                   {{"PATH", "/bin:/usr/bin"}}, host);
    if (!parsed.ok()) {
      WriteAll(2, absl::StrCat("ddprun status: error: ", parsed.status().message(), "\n"));
      return kExitUsage;
    }
    options.rdzv = parsed->options.rdzv;
  }
  QueryFn query;
  absl::Status settings_status;
  std::optional<EtcdSettings> etcd;
  std::optional<C10dSettings> c10d;
  if (options.rdzv_backend != RdzvBackend::kC10d) {
    auto settings = MakeEtcdSettings(options);
    settings_status = settings.status();
    if (settings.ok()) etcd = *std::move(settings);
    query = [&](GrpcRendezvousPlugin* plugin) {
      return plugin->QueryEtcdRun(*etcd, options.rdzv_id);
    };
  } else {
    auto settings = MakeC10dSettings(options, host);
    settings_status = settings.status();
    if (settings.ok()) {
      c10d = *std::move(settings);
      c10d->host_here = false;
    }
    query = [&](GrpcRendezvousPlugin* plugin) { return plugin->QueryRun(*c10d, options.rdzv_id); };
  }
  if (watch) {
    return Watch(options, settings_status, query, json,
                 std::chrono::milliseconds(static_cast<int64_t>(interval_s * 1000)));
  }
  Query q = QueryOnce(options, settings_status, query);
  if (!q.run.has_value()) {
    WriteAll(2, absl::StrCat(q.error, "\n"));
    return q.exit_code;
  }
  Show(*q.run, json, /*redraw=*/false);
  return 0;
}

}  // namespace ddprun::launcher
