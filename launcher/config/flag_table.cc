#include "launcher/config/flag_table.h"

#include <signal.h>

#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/signal_names.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "launcher/config/numa_binding.h"
#include "launcher/config/rdzv_backend.h"
#include "launcher/config/template_macros.h"
#include "rendezvous/api/preflight.h"

namespace ddprun::launcher {
namespace {

absl::Status Invalid(const FlagValue& s, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(s.where, "=", ValueForMessage(s.value), ": ", why));
}

absl::StatusOr<int64_t> IntOf(const FlagValue& s, int64_t min, int64_t max) {
  return ParseInt(s.where, s.value, min, max);
}

absl::StatusOr<bool> BoolOf(const FlagValue& s) { return ParseBool(s.where, s.value); }

// A dotted module name (torch, torch.distributed): identifiers of letters, digits and '_' (any
// non-ASCII byte counts as a letter, as Python allows Unicode names), not starting with a digit.
bool IsPythonModuleName(absl::string_view name) {
  for (absl::string_view part : absl::StrSplit(name, '.')) {
    if (part.empty() || absl::ascii_isdigit(part[0])) return false;
    for (char c : part) {
      if (!absl::ascii_isalnum(c) && c != '_' && static_cast<unsigned char>(c) < 0x80) {
        return false;
      }
    }
  }
  return true;
}

// How each flag's value is read into the options (the `apply` of its kFlags entry). Errors are
// kInvalidArgument naming the source and the value (Invalid()).

absl::Status ApplyNnodes(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  return ParseNnodes(s.where, s.value, &o->min_nodes, &o->max_nodes);
}

absl::Status ApplyNprocPerNode(const FlagValue& s, const HostInfo& host, LaunchOptions* o) {
  const std::string v = absl::AsciiStrToLower(s.value);
  o->nproc_per_node_text = v;
  if (v == "cpu") {
    o->nproc_per_node = host.cpu_count;
  } else if (v == "gpu") {
    if (host.gpu_count == 0) return Invalid(s, "no GPU is visible on this node");
    o->nproc_per_node = host.gpu_count;
  } else if (v == "auto") {
    o->nproc_per_node = host.gpu_count > 0 ? host.gpu_count : host.cpu_count;
  } else if (v == "xpu") {
    // torch 2.x counts Intel GPUs through torch.xpu; ddprun loads no torch and counts only
    // NVIDIA devices, so it cannot know the number: say so rather than guess.
    return Invalid(s, "ddprun counts NVIDIA GPUs only (gpu, auto); give the number of XPUs");
  } else {
    auto n = ParseInt(s.where, s.value, 1, 1 << 16);
    if (!n.ok()) return Invalid(s, "must be a positive integer, auto, cpu or gpu");
    o->nproc_per_node = static_cast<int>(*n);
  }
  return absl::OkStatus();
}

absl::Status ApplyRdzvBackend(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  std::optional<RdzvBackend> backend = ParseRdzvBackend(s.value);
  if (!backend.has_value()) return Invalid(s, "must be static, c10d, etcd or etcd-v3");
  o->rdzv_backend = *backend;
  return absl::OkStatus();
}

// HOST[:PORT], or for etcd a comma-separated list of them (its cluster's members); whether a
// list is allowed depends on --rdzv-backend, checked in Validate() once every source is read.
absl::Status ApplyRdzvEndpoint(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  o->rdzv_endpoint = s.value;
  for (absl::string_view part : absl::StrSplit(s.value, ',', absl::SkipEmpty())) {
    DDPRUN_RETURN_IF_ERROR(ParseHostPort(s.where, part, 0).status());
  }
  return absl::OkStatus();
}

// The run id is sent to the rendezvous and names the run's folder under --log-dir
// (LOG_DIR/RUN_ID): it must be one folder name there, never a path ("../../x") or text with
// control characters, and no longer than the rendezvous accepts.
absl::Status ApplyRdzvId(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  if (s.value.empty()) return Invalid(s, "must not be empty");
  if (s.value.size() > kMaxRendezvousFieldBytes) {
    return Invalid(s, absl::StrCat("must be at most ", kMaxRendezvousFieldBytes, " bytes"));
  }
  if (s.value == "." || s.value == "..") return Invalid(s, "must not be . or ..");
  for (char c : s.value) {
    if (c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Invalid(s,
                     "must not contain '/' or control characters (it names a folder under "
                     "--log-dir)");
    }
  }
  o->rdzv_id = s.value;
  return absl::OkStatus();
}

absl::Status ApplyRdzvConf(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  if (absl::StripAsciiWhitespace(s.value).empty()) return absl::OkStatus();
  for (absl::string_view item : absl::StrSplit(s.value, ',', absl::SkipWhitespace())) {
    std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty()) {
      return Invalid(s, absl::StrCat("'", ValueForMessage(item), "' is not key=value"));
    }
    std::string key(absl::StripAsciiWhitespace(kv[0]));
    std::string value(absl::StripAsciiWhitespace(kv[1]));
    o->rdzv.given[std::move(key)] = std::move(value);  // parsed whole by Validate()
  }
  return absl::OkStatus();
}

// A boolean flag that sets `field` (--standalone, --use-env, --virtual-local-rank).
template <bool LaunchOptions::*field>
absl::Status ApplyBool(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(o->*field, BoolOf(s));
  return absl::OkStatus();
}

// A boolean flag that clears `field` (--no-worker-tty, --quiet).
template <bool LaunchOptions::*field>
absl::Status ApplyNegatedBool(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(bool on, BoolOf(s));
  o->*field = !on;
  return absl::OkStatus();
}

// A boolean flag with nothing to set here, whose value is only checked: --run-path (the
// default), --no-slurm (read by SlurmWanted()), --no-platform-env (read by PlanPlatform()).
absl::Status CheckBool(const FlagValue& s, const HostInfo&, LaunchOptions*) {
  return BoolOf(s).status();
}

absl::Status ApplyMaxRestarts(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(int64_t v, IntOf(s, 0, 1 << 30));
  o->max_restarts = static_cast<int>(v);
  return absl::OkStatus();
}

absl::Status ApplyMonitorInterval(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(auto ms, ParseSeconds(s.where, s.value));
  o->monitor_interval_s = ms.count() / 1000.0;
  return absl::OkStatus();
}

absl::Status ApplyStartMethod(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  if (s.value != "spawn" && s.value != "fork" && s.value != "forkserver") {
    return Invalid(s, "must be spawn, fork or forkserver");
  }
  o->start_method = s.value;
  return absl::OkStatus();
}

absl::Status ApplyRole(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  if (s.value.empty()) return Invalid(s, "must not be empty");
  o->role = s.value;
  return absl::OkStatus();
}

absl::Status ApplyModule(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(bool on, BoolOf(s));
  if (!on) return absl::OkStatus();
  if (o->entrypoint_kind == EntrypointKind::kBinary) {
    return Invalid(s, "--module and --no-python cannot be used together");
  }
  o->entrypoint_kind = EntrypointKind::kPythonModule;
  return absl::OkStatus();
}

absl::Status ApplyNoPython(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(bool on, BoolOf(s));
  if (!on) return absl::OkStatus();
  if (o->entrypoint_kind == EntrypointKind::kPythonModule) {
    return Invalid(s, "--module and --no-python cannot be used together");
  }
  o->entrypoint_kind = EntrypointKind::kBinary;
  return absl::OkStatus();
}

absl::Status ApplyLogDir(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  o->log_dir = s.value;
  return absl::OkStatus();
}

// --redirects, --tee.
template <StdSpec LaunchOptions::*field>
absl::Status ApplyStdSpec(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(o->*field, ParseStdSpec(s.where, s.value));
  return absl::OkStatus();
}

// --local-ranks-filter, --ranks-filter.
template <std::set<int> LaunchOptions::*field>
absl::Status ApplyRanksFilter(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  (o->*field).clear();
  for (absl::string_view item : absl::StrSplit(s.value, ',', absl::SkipWhitespace())) {
    int rank = 0;
    if (!absl::SimpleAtoi(item, &rank) || rank < 0) {
      return Invalid(s, field == &LaunchOptions::local_ranks_filter
                            ? "must be a comma-separated list of local ranks"
                            : "must be a comma-separated list of ranks");
    }
    (o->*field).insert(rank);
  }
  return absl::OkStatus();
}

absl::Status ApplyLogLinePrefixTemplate(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  std::vector<std::string> unknown;
  SubstituteTemplate(s.value, LogLinePrefixValues("r", 0, 0, "h"), &unknown);
  if (!unknown.empty()) {
    return Invalid(s, absl::StrCat("unknown macro ${", unknown.front(),
                                   "} (known: ${role_name}, ${rank}, ${local_rank}, "
                                   "${hostname})"));
  }
  o->log_line_prefix_template = s.value;
  return absl::OkStatus();
}

absl::Status ApplyEventLogHandler(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  if (s.value != "null" && s.value != "console") return Invalid(s, "must be null or console");
  o->event_log_handler = s.value;
  return absl::OkStatus();
}

absl::Status ApplyNodeRank(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(int64_t v, IntOf(s, 0, 1 << 20));
  o->node_rank = static_cast<int>(v);
  return absl::OkStatus();
}

absl::Status ApplyMasterAddr(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  if (s.value.empty()) return Invalid(s, "must not be empty");
  // A host the workers can reach ("[::1" would have them wait for ever on a store that no
  // address names): an IP address or a host name, without a port (--master-port gives it).
  DDPRUN_ASSIGN_OR_RETURN(const HostPort host, ParseHostPort(s.where, s.value, 0));
  if (host.port != 0) return Invalid(s, "expected a host without a port (--master-port gives it)");
  o->master_addr = s.value;
  o->master_addr_given = true;
  return absl::OkStatus();
}

absl::Status ApplyMasterPort(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(int64_t v, IntOf(s, 1, 65535));
  o->master_port = static_cast<int>(v);
  o->master_port_given = true;
  return absl::OkStatus();
}

// A host name or IP address the rendezvous passes on to the other nodes (empty: detected).
absl::Status ApplyLocalAddr(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  o->local_addr = s.value;
  if (s.value.empty()) return absl::OkStatus();
  if (s.value.size() > kMaxRendezvousFieldBytes) {
    return Invalid(s, absl::StrCat("must be at most ", kMaxRendezvousFieldBytes, " bytes"));
  }
  absl::StatusOr<HostPort> host = ParseHostPort(s.where, s.value, 0);
  if (!host.ok()) return host.status();
  if (host->port != 0) return Invalid(s, "expected a host name or address, without a port");
  return absl::OkStatus();
}

// --duplicate-stdout-filters, --duplicate-stderr-filters.
template <std::vector<std::string> LaunchOptions::*field>
absl::Status ApplyFilters(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  std::vector<std::string> filters = absl::StrSplit(s.value, ',', absl::SkipEmpty());
  o->*field = std::move(filters);
  return absl::OkStatus();
}

absl::Status ApplyLocalRankArg(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  if (s.value != "local_rank" && s.value != "local-rank" && !s.value.empty()) {
    return Invalid(s, "expected local_rank (--local_rank=N) or local-rank (--local-rank=N)");
  }
  o->local_rank_arg = s.value;
  return absl::OkStatus();
}

absl::Status ApplySignals(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  o->extra_signals.clear();
  o->signals_to_handle = s.value;
  for (absl::string_view item : absl::StrSplit(s.value, ',', absl::SkipWhitespace())) {
    const int sig = SignalFromName(item);
    if (sig == 0 || sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD) {
      return Invalid(s, absl::StrCat("'", item, "' is not a signal ddprun can handle"));
    }
    if (!IsStopSignal(sig)) o->extra_signals.push_back(sig);
  }
  return absl::OkStatus();
}

// torch 2.x's --logs-specs names a Python class (a `torchrun.logs_specs` entry point) that
// decides where workers' logs go. ddprun runs no Python, so it cannot load one; its own layout
// is torchrun's DefaultLogsSpecs, which torch 2.x registers as `default` (and some wrappers name):
// that one is accepted, any other is refused with what to use instead.
absl::Status ApplyLogsSpecs(const FlagValue& s, const HostInfo&, LaunchOptions*) {
  if (s.value == "default") return absl::OkStatus();
  return Invalid(s,
                 "a torchrun.logs_specs entry point is Python code, which ddprun does not load; "
                 "its logs are laid out as torchrun's default LogsSpecs (--logs-specs=default: "
                 "--log-dir, --redirects, --tee, --local-ranks-filter)");
}

// --stop-timeout and torch 2.x's --shutdown-timeout.
absl::Status ApplyStopTimeout(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(o->stop_timeout, ParseSeconds(s.where, s.value));
  return absl::OkStatus();
}

absl::Status ApplyNumaBinding(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  auto mode = ParseNumaMode(s.value);
  if (!mode.ok()) return Invalid(s, mode.status().message());
  o->numa_binding = *mode;
  o->numa_binding_name = s.value;
  return absl::OkStatus();
}

absl::Status ApplyPreload(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  std::vector<std::string> modules;
  for (absl::string_view item : absl::StrSplit(s.value, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    if (!IsPythonModuleName(item)) {
      return Invalid(s, absl::StrCat("'", item, "' is not a Python module name"));
    }
    modules.emplace_back(item);
  }
  o->preload = std::move(modules);
  o->preload_given = absl::StrCat(s.where, "=", s.value);
  return absl::OkStatus();
}

absl::Status ApplyHangTimeout(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(o->hang_timeout, ParseSeconds(s.where, s.value));
  if (o->hang_timeout.count() <= 0) return Invalid(s, "must be a positive number of seconds");
  return absl::OkStatus();
}

absl::Status ApplyHangStartupTimeout(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(o->hang_startup_timeout, ParseSeconds(s.where, s.value));
  if (o->hang_startup_timeout.count() <= 0) {
    return Invalid(s, "must be a positive number of seconds");
  }
  o->hang_startup_given = absl::StrCat(s.where, "=", s.value);
  return absl::OkStatus();
}

absl::Status ApplyRestartMode(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  if (s.value == "cold") {
    o->restart_mode = RestartMode::kCold;
  } else if (s.value == "in-process") {
    o->restart_mode = RestartMode::kInProcess;
  } else {
    return Invalid(s, "expected cold or in-process");
  }
  return absl::OkStatus();
}

absl::Status ApplyPreflight(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  if (s.value == "auto") {
    o->preflight = PreflightMode::kAuto;
  } else if (s.value == "on") {
    o->preflight = PreflightMode::kOn;
  } else if (s.value == "off") {
    o->preflight = PreflightMode::kOff;
  } else {
    return Invalid(s, "expected auto, on or off");
  }
  return absl::OkStatus();
}

absl::Status ApplyPreflightMargin(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  double margin = 0;
  if (!absl::SimpleAtod(s.value, &margin) || !rendezvous::ValidPreflightMargin(margin)) {
    return Invalid(s,
                   "must be a fraction above 0 and at most 10 (0.2: a node may take 1.2x the "
                   "time of the job's median node)");
  }
  o->preflight_margin = margin;
  return absl::OkStatus();
}

absl::Status ApplyCrashLoop(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  if (s.value == "stop") {
    o->crash_loop = CrashLoop::kStop;
  } else if (s.value == "retry") {
    o->crash_loop = CrashLoop::kRetry;
  } else {
    return Invalid(s, "expected stop or retry");
  }
  return absl::OkStatus();
}

absl::Status ApplyHealthCheck(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  if (absl::StripAsciiWhitespace(s.value).empty()) return Invalid(s, "an empty command");
  o->health_check = s.value;
  return absl::OkStatus();
}

absl::Status ApplyHealthCheckTimeout(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(o->health_check_timeout, ParseSeconds(s.where, s.value));
  if (o->health_check_timeout.count() <= 0) {
    return Invalid(s, "must be a positive number of seconds");
  }
  return absl::OkStatus();
}

absl::Status ApplyGpuReleaseTimeout(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(o->gpu_release_timeout, ParseSeconds(s.where, s.value));
  return absl::OkStatus();
}

absl::Status ApplyReformTimeout(const FlagValue& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(o->reform_timeout, ParseSeconds(s.where, s.value));
  if (o->reform_timeout.count() <= 0) return Invalid(s, "must be a positive number of seconds");
  return absl::OkStatus();
}

// Every flag, in --help order. The underscore spelling is accepted for each dashed name.
constexpr FlagDef kFlags[] = {
    {"nnodes", "", false, "Number of nodes, N or MIN:MAX (elastic). Default 1.", ApplyNnodes},
    {"nproc-per-node", "", false,
     "Workers per node: an integer, auto, cpu or gpu (xpu: refused, give a number). "
     "Default 1.",
     ApplyNprocPerNode, ValueKind::kChoice, "auto cpu gpu"},
    {"rdzv-backend", "", false, "Rendezvous backend: static (default), c10d, etcd, etcd-v3.",
     ApplyRdzvBackend, ValueKind::kChoice, "static c10d etcd etcd-v3"},
    {"rdzv-endpoint", "", false,
     "Rendezvous server host[:port] (c10d default port 29400). c10d: a list of the job's hosts "
     "(the first hosts the run) lets late nodes find a run that failed over; etcd: its members.",
     ApplyRdzvEndpoint},
    {"rdzv-id", "", false,
     "Run id shared by the nodes of one job: at most 256 bytes, no '/' or control characters. "
     "Default none.",
     ApplyRdzvId},
    {"rdzv-conf", "", false,
     "Rendezvous settings k=v,...: join_timeout, last_call_timeout, "
     "failure_last_call_timeout (the round after a failure; 0 in-process), close_timeout, "
     "read_timeout, keep_alive_interval, keep_alive_max_attempt, is_host, token_file, "
     "tls_cert, tls_key, tls_ca, tls_client_ca, tls_server_name, protocol (https: TLS with "
     "the default roots), etcd_prefix, etcd_user, etcd_password_file, http_port, http_host; "
     "torchrun's etcd TLS keys cacert/ca_cert, cert/ssl_cert, key/ssl_cert_key mean tls_ca, "
     "tls_cert, tls_key. Static jobs: static_coordination (rendezvous, the default: several "
     "nodes coordinate through node 0's agent; none: each on its own), static_port "
     "(MASTER_PORT+1). liveness=off|auto|on (auto with several nodes): heartbeat "
     "datagrams to the server (etcd: to the coordinator agent); a silent member is "
     "lost in ~0.25 s while a spare stands ready to take its place (auto) or always (on), "
     "else by its lease; with liveness_interval_ms (20), liveness_phi (8), liveness_pause_ms "
     "(120), liveness_min_sd_ms (20), liveness_max_rate (100000 heartbeats a second per run: "
     "a larger run heartbeats more slowly), liveness_observers (1, the only value so far). mtbf: "
     "the run's mean time between failures "
     "in seconds, the checkpoint advice's prior until the run's own failures say more. "
     "requalify_interval: seconds between the tries of a node set aside by the preflight or "
     "--evict-slow to pass the preflight again (30).",
     ApplyRdzvConf},
    {"standalone", "", true, "One node: a private rendezvous on loopback, random port and run id.",
     ApplyBool<&LaunchOptions::standalone>},
    {"evict-slow", "", true,
     "A member whose workers compute more than 20 % slower than the run's median node for 3 "
     "reports in a row (about 15 s; the server names it either way) is set aside (its workers "
     "stop; a spare again once it passes the preflight, see --preflight) and a spare standing "
     "ready takes its group rank; without a spare it is only named. "
     "c10d and static rendezvous; the first agent's setting is the run's.",
     ApplyBool<&LaunchOptions::evict_slow>},
    {"preflight", "", false,
     "Before the first round starts its workers, every node measures its cores (a CPU GEMM) "
     "and its network to two other nodes on the address its workers use (round trip and a "
     "short TCP throughput probe each way, in a ring: about 1.5 s in all). A node slower than "
     "the job's median (compute by more than --preflight-margin, a link below half the median) "
     "is named with its figures; with a spare it is kept out and the spare takes its place, "
     "without one the job starts and says so. A node kept out, or evicted by --evict-slow, "
     "waits out of the run and measures again every requalify_interval (--rdzv-conf, 30 s): "
     "once it passes against the job's median it is a spare; its agent exits 5 if the job "
     "ends first. auto (default): on for "
     "multi-node jobs (c10d, ddprun-rdzv, etcd, a coordinated static job); on; off.",
     ApplyPreflight, ValueKind::kChoice, "auto on off"},
    {"preflight-margin", "", false,
     "How much slower than the job's median node a node's compute may measure in the "
     "preflight: a fraction, default 0.2 (a node that takes 1.2x the median's time passes); a "
     "link is judged with at least 1 (half the median's throughput).",
     ApplyPreflightMargin},
    {"max-restarts", "", false,
     "Failure-triggered restarts of the worker group, one budget for the job. Default 0.",
     ApplyMaxRestarts},
    {"monitor-interval", "", false,
     "Accepted for torchrun compatibility; ddprun reacts to events and never polls.",
     ApplyMonitorInterval},
    {"start-method", "", false, "Accepted for torchrun compatibility (spawn, fork, forkserver).",
     ApplyStartMethod, ValueKind::kChoice, "spawn fork forkserver"},
    {"role", "", false, "Worker role name (ROLE_NAME). Default default.", ApplyRole},
    {"module", "-m", true, "Run the entrypoint as a Python module (python -m).", ApplyModule},
    {"no-python", "", true, "Run the entrypoint as a program, without python.", ApplyNoPython},
    {"run-path", "", true, "Run the entrypoint as a Python script (accepted; the default).",
     CheckBool},
    {"log-dir", "", false,
     "Folder for per-attempt, per-rank logs and error files (LOG_DIR/RUN_ID/attempt_N/RANK).",
     ApplyLogDir, ValueKind::kFolder},
    {"redirects", "-r", false,
     "Send worker streams to log files only: 0 none, 1 stdout, 2 stderr, 3 both; or "
     "RANK:MASK,... per local rank.",
     ApplyStdSpec<&LaunchOptions::redirects>, ValueKind::kChoice, "0 1 2 3"},
    {"tee", "-t", false,
     "Send worker streams to log files and the console with [ROLE<local rank>]: prefixes; "
     "values as --redirects.",
     ApplyStdSpec<&LaunchOptions::tee>, ValueKind::kChoice, "0 1 2 3"},
    {"local-ranks-filter", "", false, "Show only these local ranks on the console: 0,1,...",
     ApplyRanksFilter<&LaunchOptions::local_ranks_filter>},
    {"ranks-filter", "", false,
     "Show only these global ranks on the console: 0,8,... (a worker's rank when it starts; "
     "with --local-ranks-filter, both must allow it). Log files keep every rank.",
     ApplyRanksFilter<&LaunchOptions::ranks_filter>},
    {"log-line-prefix-template", "", false,
     "Prefix of every console line of a worker, e.g. '[${hostname} ${rank}]:' (macros "
     "${role_name}, ${rank}, ${local_rank}, ${hostname}; also "
     "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE). Default: [ROLE<local rank>]: with --tee.",
     ApplyLogLinePrefixTemplate},
    {"event-log-handler", "", false,
     "Where torchrun's end-of-run events go: null (default) drops them, console writes one "
     "JSON line per worker and one for the agent on stderr.",
     ApplyEventLogHandler, ValueKind::kChoice, "null console"},
    {"node-rank", "", false, "This node's rank (static backend; honoured by the others).",
     ApplyNodeRank},
    {"master-addr", "", false, "MASTER_ADDR for the static backend. Default 127.0.0.1.",
     ApplyMasterAddr},
    {"master-port", "", false,
     "MASTER_PORT for the static backend. Default 29500 for several nodes (node 0's agent "
     "then coordinates them on MASTER_PORT+1); one node gets a free port ddprun holds (and an "
     "explicit port must be free).",
     ApplyMasterPort},
    {"local-addr", "", false, "This node's address as the other nodes should reach it.",
     ApplyLocalAddr},
    {"duplicate-stdout-filters", "", false,
     "Comma-separated strings: workers' stdout lines containing any of them are copied to "
     "LOG_DIR/RUN_ID/attempt_N/filtered_stdout.log.",
     ApplyFilters<&LaunchOptions::duplicate_stdout_filters>},
    {"duplicate-stderr-filters", "", false, "The same for stderr lines (filtered_stderr.log).",
     ApplyFilters<&LaunchOptions::duplicate_stderr_filters>},
    {"local-rank-arg", "", false,
     "torch.distributed.launch's way for scripts that parse --local_rank: local_rank appends "
     "--local_rank=N after the script (torch 1.x launch), local-rank --local-rank=N (torch "
     "2.x). Off by default (torchrun's way: LOCAL_RANK only).",
     ApplyLocalRankArg, ValueKind::kChoice, "local_rank local-rank"},
    {"use-env", "", true,
     "torch.distributed.launch's --use_env: LOCAL_RANK in the environment only (no "
     "--local-rank-arg). Always true of torchrun and ddprun.",
     ApplyBool<&LaunchOptions::use_env>},
    {"signals-to-handle", "", false,
     "Signals ddprun handles: SIGINT, SIGTERM, SIGHUP and SIGQUIT stop the workers (exit "
     "128+N); others listed here (e.g. SIGUSR1) are forwarded to the workers. Default "
     "SIGTERM,SIGINT,SIGHUP,SIGQUIT.",
     ApplySignals},
    {"stop-timeout", "", false,
     "Seconds between SIGTERM and SIGKILL when stopping workers. Default 10.", ApplyStopTimeout},
    {"shutdown-timeout", "", false,
     "torch 2.x's name for --stop-timeout (also TORCH_ELASTIC_SHUTDOWN_TIMEOUT).",
     ApplyStopTimeout},
    {"logs-specs", "", false,
     "torch 2.x: a Python LogsSpecs plugin. Only 'default' (torchrun's own layout, ddprun's); "
     "any other is refused (ddprun loads no Python).",
     ApplyLogsSpecs},
    {"virtual-local-rank", "", true,
     "Every worker sees LOCAL_RANK=0 and only its own GPU in CUDA_VISIBLE_DEVICES (the "
     "N-th entry of ddprun's CUDA_VISIBLE_DEVICES, else GPU N).",
     ApplyBool<&LaunchOptions::virtual_local_rank>},
    {"numa-binding", "", false,
     "Run each worker on the CPUs near its GPU (from sysfs; no numactl): node (the GPU's NUMA "
     "node), socket (its socket), exclusive (the node's cores shared out among its GPUs), "
     "core-complex (one last-level-cache domain per GPU). Off by default.",
     ApplyNumaBinding, ValueKind::kChoice, "node socket exclusive core-complex"},
    {"preload", "", false,
     "Warm restarts: for Python workers, comma-separated modules (e.g. torch) that a spare "
     "interpreter per local rank imports ahead of every start, at idle priority; a start hands "
     "it the worker's environment and streams and it runs the script as python3 -u would. For "
     "a --no-python program that takes the hand-over itself (ddp-train): native. Off by "
     "default; see docs/guide/warm-restarts.md.",
     ApplyPreload},
    {"hang-timeout", "", false,
     "Seconds without a sign of life (output, a '\\r' update, a FileTimer message, a step "
     "report) after which a worker is hung: stacks of every worker, then a restart. The clock "
     "runs from the worker's start: choose it above the start's silence (4-6 s for LibTorch "
     "with CUDA on an H200), or give the start its own --hang-startup-timeout. Off by "
     "default.",
     ApplyHangTimeout},
    {"hang-startup-timeout", "", false,
     "With --hang-timeout: seconds a worker may stay silent after its start (imports, CUDA and "
     "NCCL set-up, loading a checkpoint) before it is hung; from its first sign of life on, "
     "--hang-timeout applies. Default: --hang-timeout.",
     ApplyHangStartupTimeout},
    {"restart-mode", "", false,
     "What a failure does to the workers that did not fail. cold (default, torchrun's): every "
     "worker of the job is stopped and started again. in-process: survivors keep their "
     "processes and re-form with replacements over DDPRUN_CONTROL_SOCKET; workers that do not "
     "speak the protocol restart cold. See docs/guide/in-process-recovery.md.",
     ApplyRestartMode, ValueKind::kChoice, "cold in-process"},
    {"crash-loop", "", false,
     "A failure that repeats before any progress (a step report or a line on a worker's "
     "stdout in the attempt that failed). stop (default): the second identical one ends the "
     "job with exit code 4 instead of spending the rest of --max-restarts. retry: restart "
     "until the budget is spent, as torchrun does.",
     ApplyCrashLoop, ValueKind::kChoice, "stop retry"},
    {"health-check", "", false,
     "A shell command (sh -c) that must exit 0 before this node joins each round, e.g. a GPU "
     "or filesystem probe. A failing one keeps the node out: the others go on without it "
     "(elastic; a fixed world waits), it tries again after 1, 2, 4... up to 30 s and comes back "
     "as a new node when it passes; its last lines of output are logged. Failing for "
     "join_timeout ends this agent (exit 3); a command the shell cannot find or run, exit 2. "
     "See docs/guide/health-checks.md.",
     ApplyHealthCheck},
    {"health-check-timeout", "", false,
     "Seconds one run of --health-check may take before it is killed (with what it started) "
     "and counts as failed. Default 60.",
     ApplyHealthCheckTimeout},
    {"gpu-release-timeout", "", false,
     "Before a cold restart on a node with nvidia-smi, wait up to this many seconds until no "
     "process of the stopped workers (their pids and process groups) is in the driver's list "
     "of GPU processes, so that new workers do not fail on memory a dying one still holds; "
     "then start them anyway, saying what is still held. 0: do not wait. Default 30.",
     ApplyGpuReleaseTimeout},
    {"reform-timeout", "", false,
     "In-process mode: seconds a worker has from its round message to its ready; a worker "
     "that misses it is killed and counts as a failure. Default 60.",
     ApplyReformTimeout},
    {"no-worker-tty", "", true,
     "Give workers pipes even when ddprun's output is a terminal (by default a worker whose "
     "stream goes to ddprun's terminal gets a pseudo-terminal sized like it, so isatty(), "
     "colours and progress bars behave as under torchrun).",
     ApplyNegatedBool<&LaunchOptions::worker_tty>},
    {"quiet", "", true, "Only warnings and errors from ddprun itself.",
     ApplyNegatedBool<&LaunchOptions::verbose>},
    {"no-platform-env", "", true,
     "Ignore MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK given to this node by a platform (also "
     "DDPRUN_NO_PLATFORM=1); see docs/guide/platforms.md.",
     CheckBool},
    {"no-slurm", "", true,
     "Ignore the Slurm job environment (also DDPRUN_NO_SLURM=1); see docs/guide/slurm.md.",
     CheckBool},
};

}  // namespace

absl::Span<const FlagDef> FlagTable() { return kFlags; }

const FlagDef* FindFlag(absl::string_view name) {
  for (const FlagDef& f : kFlags) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

absl::Status ApplyFlag(const FlagValue& v, const HostInfo& host, LaunchOptions* o) {
  const FlagDef* f = FindFlag(v.flag);
  if (f == nullptr) return absl::InternalError(absl::StrCat("unhandled flag ", v.flag));
  return f->apply(v, host, o);
}

std::string PetName(absl::string_view flag) {
  return absl::StrCat("PET_", absl::AsciiStrToUpper(absl::StrReplaceAll(flag, {{"-", "_"}})));
}

std::vector<std::string> Spellings(const FlagDef& f) {
  std::vector<std::string> out;
  if (f.short_name[0] != '\0') out.push_back(f.short_name);
  out.push_back(absl::StrCat("--", f.name));
  if (absl::StrContains(f.name, "-")) {
    out.push_back(absl::StrCat("--", absl::StrReplaceAll(f.name, {{"-", "_"}})));
  }
  return out;
}

}  // namespace ddprun::launcher
