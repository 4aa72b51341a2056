#include "launcher/config/cli.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <cstddef>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/signal_names.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/version.h"
#include "launcher/config/abbreviations.h"
#include "launcher/config/completion.h"
#include "launcher/config/flag_value.h"
#include "launcher/config/numa_binding.h"
#include "launcher/config/platform_env.h"
#include "launcher/config/rdzv_backend.h"
#include "launcher/config/rdzv_conf.h"
#include "launcher/config/slurm_env.h"
#include "launcher/config/template_macros.h"
#include "launcher/config/yaml_config.h"

namespace ddprun::launcher {
namespace {

// A raw value and where it came from, for messages: "--nnodes", "PET_NNODES",
// "job.yaml:3: nnodes".
struct Sourced {
  std::string value;
  std::string where;
};

absl::Status Invalid(const Sourced& s, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(s.where, "=", ValueForMessage(s.value), ": ", why));
}

std::string PetName(absl::string_view flag) {
  return absl::StrCat("PET_", absl::AsciiStrToUpper(absl::StrReplaceAll(flag, {{"-", "_"}})));
}

absl::StatusOr<int64_t> IntOf(const Sourced& s, int64_t min, int64_t max) {
  return ParseInt(s.where, s.value, min, max);
}

absl::StatusOr<bool> BoolOf(const Sourced& s) { return ParseBool(s.where, s.value); }

// Resolves a program name the way execvp would, so a missing binary is a usage error (exit 2)
// before any worker starts rather than 127 from every worker.
// A directory is "executable" to access(X_OK) but not to execve: it must be a regular file.
absl::StatusOr<std::string> ResolveExecutable(const std::string& name, const Environment& env) {
  auto is_regular = [](const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  };
  if (name.find('/') != std::string::npos) {
    if (access(name.c_str(), F_OK) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": no such file"));
    }
    if (!is_regular(name)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": not a regular file"));
    }
    if (access(name.c_str(), X_OK) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": not executable"));
    }
    return name;
  }
  auto it = env.find("PATH");
  const std::string path = it == env.end() ? "/usr/local/bin:/usr/bin:/bin" : it->second;
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    if (dir.empty()) dir = ".";
    std::string candidate = absl::StrCat(dir, "/", name);
    if (is_regular(candidate) && access(candidate.c_str(), X_OK) == 0) return name;
  }
  return absl::InvalidArgumentError(absl::StrCat(name, ": not found in PATH"));
}

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

// How each flag's value is read into the options: the `apply` of its kFlags entry. Errors are
// kInvalidArgument naming the source and the value (Invalid()).
using ApplyFn = absl::Status (*)(const Sourced& s, const HostInfo& host, LaunchOptions* o);

absl::Status ApplyNnodes(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  return ParseNnodes(s.where, s.value, &o->min_nodes, &o->max_nodes);
}

absl::Status ApplyNprocPerNode(const Sourced& s, const HostInfo& host, LaunchOptions* o) {
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

absl::Status ApplyRdzvBackend(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  std::optional<RdzvBackend> backend = ParseRdzvBackend(s.value);
  if (!backend.has_value()) return Invalid(s, "must be static, c10d, etcd or etcd-v3");
  o->rdzv_backend = *backend;
  return absl::OkStatus();
}

// HOST[:PORT], or for etcd a comma-separated list of them (its cluster's members); whether a
// list is allowed depends on --rdzv-backend, checked in Validate() once every source is read.
absl::Status ApplyRdzvEndpoint(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  o->rdzv_endpoint = s.value;
  for (absl::string_view part : absl::StrSplit(s.value, ',', absl::SkipEmpty())) {
    DDPRUN_RETURN_IF_ERROR(ParseHostPort(s.where, part, 0).status());
  }
  return absl::OkStatus();
}

// The run id is sent to the rendezvous and names the run's folder under --log-dir
// (LOG_DIR/RUN_ID): it must be one folder name there, never a path ("../../x") or text with
// control characters, and no longer than the rendezvous accepts.
absl::Status ApplyRdzvId(const Sourced& s, const HostInfo&, LaunchOptions* o) {
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

absl::Status ApplyRdzvConf(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  if (absl::StripAsciiWhitespace(s.value).empty()) return absl::OkStatus();
  for (absl::string_view item : absl::StrSplit(s.value, ',', absl::SkipWhitespace())) {
    std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty()) {
      return Invalid(s, absl::StrCat("'", ValueForMessage(item), "' is not key=value"));
    }
    std::string key(absl::StripAsciiWhitespace(kv[0]));
    std::string value(absl::StripAsciiWhitespace(kv[1]));
    o->rdzv_conf[std::move(key)] = std::move(value);
  }
  return absl::OkStatus();
}

// A boolean flag that sets `field` (--standalone, --use-env, --virtual-local-rank).
template <bool LaunchOptions::*field>
absl::Status ApplyBool(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(o->*field, BoolOf(s));
  return absl::OkStatus();
}

// A boolean flag that clears `field` (--no-worker-tty, --quiet).
template <bool LaunchOptions::*field>
absl::Status ApplyNegatedBool(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(bool on, BoolOf(s));
  o->*field = !on;
  return absl::OkStatus();
}

// A boolean flag with nothing to set here, whose value is only checked: --run-path (the
// default), --no-slurm (read by SlurmWanted()), --no-platform-env (read by PlanPlatform()).
absl::Status CheckBool(const Sourced& s, const HostInfo&, LaunchOptions*) {
  return BoolOf(s).status();
}

absl::Status ApplyMaxRestarts(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(int64_t v, IntOf(s, 0, 1 << 30));
  o->max_restarts = static_cast<int>(v);
  return absl::OkStatus();
}

absl::Status ApplyMonitorInterval(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(auto ms, ParseSeconds(s.where, s.value));
  o->monitor_interval_s = ms.count() / 1000.0;
  return absl::OkStatus();
}

absl::Status ApplyStartMethod(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  if (s.value != "spawn" && s.value != "fork" && s.value != "forkserver") {
    return Invalid(s, "must be spawn, fork or forkserver");
  }
  o->start_method = s.value;
  return absl::OkStatus();
}

absl::Status ApplyRole(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  if (s.value.empty()) return Invalid(s, "must not be empty");
  o->role = s.value;
  return absl::OkStatus();
}

absl::Status ApplyModule(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(bool on, BoolOf(s));
  if (!on) return absl::OkStatus();
  if (o->entrypoint_kind == EntrypointKind::kBinary) {
    return Invalid(s, "--module and --no-python cannot be used together");
  }
  o->entrypoint_kind = EntrypointKind::kPythonModule;
  return absl::OkStatus();
}

absl::Status ApplyNoPython(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(bool on, BoolOf(s));
  if (!on) return absl::OkStatus();
  if (o->entrypoint_kind == EntrypointKind::kPythonModule) {
    return Invalid(s, "--module and --no-python cannot be used together");
  }
  o->entrypoint_kind = EntrypointKind::kBinary;
  return absl::OkStatus();
}

absl::Status ApplyLogDir(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  o->log_dir = s.value;
  return absl::OkStatus();
}

// --redirects, --tee.
template <StdSpec LaunchOptions::*field>
absl::Status ApplyStdSpec(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(o->*field, ParseStdSpec(s.where, s.value));
  return absl::OkStatus();
}

// --local-ranks-filter, --ranks-filter.
template <std::set<int> LaunchOptions::*field>
absl::Status ApplyRanksFilter(const Sourced& s, const HostInfo&, LaunchOptions* o) {
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

absl::Status ApplyLogLinePrefixTemplate(const Sourced& s, const HostInfo&, LaunchOptions* o) {
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

absl::Status ApplyEventLogHandler(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  if (s.value != "null" && s.value != "console") return Invalid(s, "must be null or console");
  o->event_log_handler = s.value;
  return absl::OkStatus();
}

absl::Status ApplyNodeRank(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(int64_t v, IntOf(s, 0, 1 << 20));
  o->node_rank = static_cast<int>(v);
  return absl::OkStatus();
}

absl::Status ApplyMasterAddr(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  if (s.value.empty()) return Invalid(s, "must not be empty");
  // A host the workers can reach ("[::1" would have them wait for ever on a store that no
  // address names): an IP address or a host name, without a port (--master-port gives it).
  DDPRUN_ASSIGN_OR_RETURN(const HostPort host, ParseHostPort(s.where, s.value, 0));
  if (host.port != 0) return Invalid(s, "expected a host without a port (--master-port gives it)");
  o->master_addr = s.value;
  o->master_addr_given = true;
  return absl::OkStatus();
}

absl::Status ApplyMasterPort(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(int64_t v, IntOf(s, 1, 65535));
  o->master_port = static_cast<int>(v);
  o->master_port_given = true;
  return absl::OkStatus();
}

// A host name or IP address the rendezvous passes on to the other nodes (empty: detected).
absl::Status ApplyLocalAddr(const Sourced& s, const HostInfo&, LaunchOptions* o) {
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
absl::Status ApplyFilters(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  std::vector<std::string> filters = absl::StrSplit(s.value, ',', absl::SkipEmpty());
  o->*field = std::move(filters);
  return absl::OkStatus();
}

absl::Status ApplyLocalRankArg(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  if (s.value != "local_rank" && s.value != "local-rank" && !s.value.empty()) {
    return Invalid(s, "expected local_rank (--local_rank=N) or local-rank (--local-rank=N)");
  }
  o->local_rank_arg = s.value;
  return absl::OkStatus();
}

absl::Status ApplySignals(const Sourced& s, const HostInfo&, LaunchOptions* o) {
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

// Which kind of spare --preload asks for, now that the entrypoint is known: modules for a
// Python worker; for a --no-python program only "native", the program's promise that it takes
// the hand-over itself (a program that does not would run as a worker with a spare's
// environment, so it is never assumed).
absl::Status ResolvePreloadKind(LaunchOptions* o) {
  if (o->preload.empty()) {
    o->preload_kind = PreloadKind::kOff;
    return absl::OkStatus();
  }
  if (o->entrypoint_kind != EntrypointKind::kBinary) {
    o->preload_kind = PreloadKind::kPython;
    return absl::OkStatus();
  }
  if (o->preload != std::vector<std::string>{"native"}) {
    return absl::InvalidArgumentError(absl::StrCat(
        o->preload_given,
        ": a --no-python program is not preloaded with Python modules; --preload=native if it "
        "takes ddprun's hand-over itself (ddp-train does; README, Warm restarts)"));
  }
  o->preload_kind = PreloadKind::kNative;
  o->preload.clear();
  return absl::OkStatus();
}

// torch 2.x's --logs-specs names a Python class (a `torchrun.logs_specs` entry point) that
// decides where workers' logs go. ddprun runs no Python, so it cannot load one; its own layout
// is torchrun's DefaultLogsSpecs, which torch 2.x registers as `default` (and some wrappers name):
// that one is accepted, any other is refused with what to use instead.
absl::Status ApplyLogsSpecs(const Sourced& s, const HostInfo&, LaunchOptions*) {
  if (s.value == "default") return absl::OkStatus();
  return Invalid(s,
                 "a torchrun.logs_specs entry point is Python code, which ddprun does not load; "
                 "its logs are laid out as torchrun's default LogsSpecs (--logs-specs=default: "
                 "--log-dir, --redirects, --tee, --local-ranks-filter)");
}

// --stop-timeout and torch 2.x's --shutdown-timeout.
absl::Status ApplyStopTimeout(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(o->stop_timeout, ParseSeconds(s.where, s.value));
  return absl::OkStatus();
}

absl::Status ApplyNumaBinding(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  auto mode = ParseNumaMode(s.value);
  if (!mode.ok()) return Invalid(s, mode.status().message());
  o->numa_binding = *mode;
  o->numa_binding_name = s.value;
  return absl::OkStatus();
}

absl::Status ApplyPreload(const Sourced& s, const HostInfo&, LaunchOptions* o) {
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

absl::Status ApplyHangTimeout(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(o->hang_timeout, ParseSeconds(s.where, s.value));
  if (o->hang_timeout.count() <= 0) return Invalid(s, "must be a positive number of seconds");
  return absl::OkStatus();
}

absl::Status ApplyHangStartupTimeout(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(o->hang_startup_timeout, ParseSeconds(s.where, s.value));
  if (o->hang_startup_timeout.count() <= 0) {
    return Invalid(s, "must be a positive number of seconds");
  }
  o->hang_startup_given = absl::StrCat(s.where, "=", s.value);
  return absl::OkStatus();
}

absl::Status ApplyRestartMode(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  if (s.value == "cold") {
    o->restart_mode = RestartMode::kCold;
  } else if (s.value == "in-process") {
    o->restart_mode = RestartMode::kInProcess;
  } else {
    return Invalid(s, "expected cold or in-process");
  }
  return absl::OkStatus();
}

absl::Status ApplyCrashLoop(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  if (s.value == "stop") {
    o->crash_loop = CrashLoop::kStop;
  } else if (s.value == "retry") {
    o->crash_loop = CrashLoop::kRetry;
  } else {
    return Invalid(s, "expected stop or retry");
  }
  return absl::OkStatus();
}

absl::Status ApplyHealthCheck(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  if (absl::StripAsciiWhitespace(s.value).empty()) return Invalid(s, "an empty command");
  o->health_check = s.value;
  return absl::OkStatus();
}

absl::Status ApplyHealthCheckTimeout(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(o->health_check_timeout, ParseSeconds(s.where, s.value));
  if (o->health_check_timeout.count() <= 0) {
    return Invalid(s, "must be a positive number of seconds");
  }
  return absl::OkStatus();
}

absl::Status ApplyGpuReleaseTimeout(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(o->gpu_release_timeout, ParseSeconds(s.where, s.value));
  return absl::OkStatus();
}

absl::Status ApplyReformTimeout(const Sourced& s, const HostInfo&, LaunchOptions* o) {
  DDPRUN_ASSIGN_OR_RETURN(o->reform_timeout, ParseSeconds(s.where, s.value));
  if (o->reform_timeout.count() <= 0) return Invalid(s, "must be a positive number of seconds");
  return absl::OkStatus();
}

struct FlagDef {
  const char* name;        // canonical spelling with dashes
  const char* short_name;  // "-m", or "" for none
  bool is_bool;
  const char* help;
  ApplyFn apply;  // reads a value of the flag into the options
  // For shell completion (completion.h): what a value is, and the choices of a kChoice.
  ValueKind value = ValueKind::kText;
  const char* choices = "";
};

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
     "(MASTER_PORT+1).",
     ApplyRdzvConf},
    {"standalone", "", true, "One node: a private rendezvous on loopback, random port and run id.",
     ApplyBool<&LaunchOptions::standalone>},
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
     "default; see README, Warm restarts.",
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
     "speak the protocol restart cold. See README, In-process recovery.",
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
     "See README, Health checks.",
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
     "DDPRUN_NO_PLATFORM=1); see README, Platform launches.",
     CheckBool},
    {"no-slurm", "", true,
     "Ignore the Slurm job environment (also DDPRUN_NO_SLURM=1); see README, Slurm.", CheckBool},
};

const FlagDef* FindFlag(absl::string_view name) {
  for (const FlagDef& f : kFlags) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

// Applies one flag's value to the options. `flag` is the canonical name.
absl::Status Apply(const std::string& flag, const Sourced& s, const HostInfo& host,
                   LaunchOptions* o) {
  const FlagDef* f = FindFlag(flag);
  if (f == nullptr) return absl::InternalError(absl::StrCat("unhandled flag ", flag));
  return f->apply(s, host, o);
}

// torch's hang-related variables, read from ddprun's own environment as torchrun reads them.
absl::Status ApplyHangEnvironment(const Environment& env, LaunchOptions* o) {
  auto get = [&](const char* name) -> std::string {
    auto it = env.find(name);
    return it == env.end() ? "" : it->second;
  };
  o->file_timer = get("TORCHELASTIC_ENABLE_FILE_TIMER") == "1";
  o->timer_file = get("TORCHELASTIC_TIMER_FILE");
  if (o->file_timer && !o->timer_file.empty()) {
    struct stat st;
    if (lstat(o->timer_file.c_str(), &st) == 0 && !S_ISFIFO(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("TORCHELASTIC_TIMER_FILE=", o->timer_file, ": exists and is not a FIFO"));
    }
  }
  if (const std::string d = get("TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT"); !d.empty()) {
    DDPRUN_ASSIGN_OR_RETURN(o->uninterruptible_timeout,
                            ParseSeconds("TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT", d));
  }
  return absl::OkStatus();
}

// The agent keeps a run's logs in LOG_DIR/RUN_ID, or LOG_DIR/RUN_ID-N when that exists, with
// attempt and rank folders below: the run id plus its suffix must fit one file name, and the
// whole below PATH_MAX (std::filesystem threw "File name too long" and aborted ddprun).
absl::Status ValidateLogDir(const LaunchOptions& o) {
  if (o.log_dir.empty() || o.standalone) {
    if (!o.log_dir.empty() && o.log_dir.size() > PATH_MAX - 256) {
      return absl::InvalidArgumentError(absl::StrCat("--log-dir=", ValueForMessage(o.log_dir),
                                                     ": longer than ", PATH_MAX - 256,
                                                     " bytes (logs need room below it)"));
    }
    return absl::OkStatus();
  }
  constexpr size_t kSuffixRoom = 8;  // "-N" when LOG_DIR/RUN_ID exists already
  if (o.rdzv_id.size() + kSuffixRoom > NAME_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rdzv-id=", ValueForMessage(o.rdzv_id), ": with --log-dir it names a folder, so at most ",
        NAME_MAX - kSuffixRoom, " bytes"));
  }
  if (o.log_dir.size() + o.rdzv_id.size() > PATH_MAX - 256) {
    return absl::InvalidArgumentError(absl::StrCat("--log-dir=", ValueForMessage(o.log_dir),
                                                   ": with the run id longer than ", PATH_MAX - 256,
                                                   " bytes (logs need room below it)"));
  }
  return absl::OkStatus();
}

// Cross-flag rules, checked once every source is merged. What is worth a warning, not an error,
// goes to `warnings`.
absl::Status Validate(const Environment& env, LaunchOptions* o,
                      std::vector<std::string>* warnings) {
  DDPRUN_RETURN_IF_ERROR(ApplyHangEnvironment(env, o));
  if (!o->hang_startup_given.empty() && o->hang_timeout.count() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(o->hang_startup_given,
                     ": only with --hang-timeout (the start's allowance before the "
                     "--hang-timeout that applies from a worker's first sign of life)"));
  }
  DDPRUN_RETURN_IF_ERROR(ValidateLogDir(*o));
  // Every --rdzv-conf value (and the lease they make) as the rendezvous setup will read it.
  DDPRUN_ASSIGN_OR_RETURN(const RdzvConf conf, ParseRdzvConf(o->rdzv_conf));
  for (const std::string& key : conf.unknown_keys) {
    warnings->push_back(UnknownKeyWarning(key, o->rdzv_conf.at(key)));
  }
  if (o->rdzv_backend != RdzvBackend::kStatic || o->standalone) {
    for (const char* key : {"static_coordination", "static_port"}) {
      if (o->rdzv_conf.count(key) > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--rdzv-conf ", key, "=", o->rdzv_conf.at(key), ": only for --rdzv-backend=static (",
            o->standalone ? "--standalone" : RdzvBackendName(o->rdzv_backend), " given)"));
      }
    }
  }
  if (o->rdzv_backend == RdzvBackend::kStatic && o->rdzv_endpoint.find(',') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rdzv-endpoint=", ValueForMessage(o->rdzv_endpoint), ": --rdzv-backend=",
        RdzvBackendName(o->rdzv_backend), " takes one HOST[:PORT] (a list is for c10d and etcd)"));
  }
  if (o->virtual_local_rank) {
    o->virtual_gpus.clear();
    auto visible = env.find("CUDA_VISIBLE_DEVICES");
    if (visible != env.end() && !visible->second.empty()) {
      o->virtual_gpus = absl::StrSplit(visible->second, ',', absl::SkipWhitespace());
      if (static_cast<int>(o->virtual_gpus.size()) < o->nproc_per_node) {
        return absl::InvalidArgumentError(
            absl::StrCat("--virtual-local-rank: CUDA_VISIBLE_DEVICES=", visible->second, " lists ",
                         o->virtual_gpus.size(), " GPU(s) for ", o->nproc_per_node,
                         " workers (--nproc-per-node); each worker needs one of its own"));
      }
    } else {
      for (int i = 0; i < o->nproc_per_node; ++i) o->virtual_gpus.push_back(absl::StrCat(i));
    }
  }
  if (o->standalone) {
    if (o->min_nodes != 1 || o->max_nodes != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--standalone runs exactly one node, but --nnodes=", o->min_nodes, ":", o->max_nodes));
    }
  }
  if (o->rdzv_backend == RdzvBackend::kStatic && !o->standalone) {
    if (o->min_nodes != o->max_nodes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--nnodes=", o->min_nodes, ":", o->max_nodes,
          ": the static rendezvous needs a fixed node count; use --rdzv-backend=c10d for "
          "elastic MIN:MAX"));
    }
    if (o->node_rank < 0) o->node_rank = 0;
    if (o->node_rank >= o->max_nodes) {
      return absl::InvalidArgumentError(
          absl::StrCat("--node-rank=", o->node_rank, ": must be below --nnodes=", o->max_nodes));
    }
  }
  if (o->entrypoint.empty()) {
    return absl::InvalidArgumentError(
        "missing the training script (or module with -m, or program with --no-python); see "
        "--help");
  }
  switch (o->entrypoint_kind) {
    case EntrypointKind::kPythonScript:
      if (access(o->entrypoint.c_str(), F_OK) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("training script ", o->entrypoint, ": no such file"));
      }
      if (access(o->entrypoint.c_str(), R_OK) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("training script ", o->entrypoint, ": not readable"));
      }
      break;
    case EntrypointKind::kBinary: {
      auto resolved = ResolveExecutable(o->entrypoint, env);
      if (!resolved.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--no-python program ", resolved.status().message()));
      }
      break;
    }
    case EntrypointKind::kPythonModule:
      break;
  }
  return ResolvePreloadKind(o);
}

// How a flag may be written: its short name, --dashed-name and, for a name with dashes, the
// --underscore_name torchrun also accepts. One list for the parser, --help and completion.
std::vector<std::string> Spellings(const FlagDef& f) {
  std::vector<std::string> out;
  if (f.short_name[0] != '\0') out.push_back(f.short_name);
  out.push_back(absl::StrCat("--", f.name));
  if (absl::StrContains(f.name, "-")) {
    out.push_back(absl::StrCat("--", absl::StrReplaceAll(f.name, {{"-", "_"}})));
  }
  return out;
}

// Every flag of the command line for the shell's completion, in --help order.
std::vector<CompletionFlag> CompletionFlags() {
  std::vector<CompletionFlag> out;
  for (const FlagDef& f : kFlags) {
    CompletionFlag c;
    c.spellings = Spellings(f);
    c.value = f.is_bool ? ValueKind::kNone : f.value;
    c.choices = absl::StrSplit(f.choices, ' ', absl::SkipEmpty());
    c.help = f.help;
    out.push_back(std::move(c));
  }
  out.push_back({{"--config"}, ValueKind::kFile, {}, "Read flags from a YAML file."});
  out.push_back({{"-h", "--help"}, ValueKind::kNone, {}, "Print the help and exit."});
  out.push_back({{"--version"}, ValueKind::kNone, {}, "Print the version and exit."});
  out.push_back({{"--print-completion"},
                 ValueKind::kChoice,
                 {"bash", "zsh"},
                 "Print the completion script for bash or zsh and exit."});
  return out;
}

// CLI11 reads "--flag=" as "--flag" without a value and takes the next argument as the value
// ("--master-addr= --no-python" set the address to "--no-python"). Up to the training script,
// "--flag=" of a flag that takes a value becomes "--flag" "": an empty value, as argparse reads
// it, which the flag's apply function then accepts (torchrun's default) or refuses.
// Every spelling the command line takes (those of CompletionFlags).
std::vector<std::string> CompletionSpellings() {
  std::vector<std::string> out;
  for (const CompletionFlag& f : CompletionFlags()) {
    out.insert(out.end(), f.spellings.begin(), f.spellings.end());
  }
  return out;
}

std::vector<std::string> SplitEmptyValues(const std::vector<std::string>& args,
                                          const std::set<std::string>& value_spellings) {
  std::vector<std::string> out;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 2 || a[0] != '-' || a == "--") break;  // the script (or "--") and after
    if (value_spellings.count(a) > 0) {  // "--flag VALUE": VALUE is not a flag, whatever it is
      out.push_back(a);
      if (i + 1 < args.size()) out.push_back(args[++i]);
      continue;
    }
    if (a.back() == '=' && value_spellings.count(a.substr(0, a.size() - 1)) > 0) {
      out.push_back(a.substr(0, a.size() - 1));
      out.emplace_back();
      continue;
    }
    out.push_back(a);
  }
  out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return out;
}

}  // namespace

std::string HelpText() {
  std::string text =
      "Usage: ddprun [options] TRAINING_SCRIPT [script args...]\n"
      "  or:  ddprun [options] -m MODULE [args...]\n"
      "  or:  ddprun [options] --no-python PROGRAM [args...]\n"
      "  or:  ddprun status --rdzv-endpoint=HOST:PORT --rdzv-id=ID (see ddprun status --help)\n"
      "\n"
      "Native replacement for torchrun: same flags (dashes or underscores; a long flag may be\n"
      "abbreviated to any unambiguous prefix, as torchrun's argparse takes it), same worker\n"
      "environment. Every flag can also come from --config FILE.yaml (same names as keys) or\n"
      "from a PET_<FLAG> environment variable; the command line wins, then the file.\n"
      "\nOptions:\n";
  auto add = [&](const std::string& names, const std::string& help) {
    absl::StrAppend(&text, "  ", names, "\n      ", help, "\n");
  };
  for (const FlagDef& f : kFlags) {
    std::string names = absl::StrJoin(Spellings(f), ", ");
    if (!f.is_bool) absl::StrAppend(&names, "=VALUE");
    add(names, f.help);
  }
  add("--config=FILE.yaml", "Read flags from a YAML file (keys are flag names; at most 1 MiB).");
  add("-h, --help", "Print this help and exit.");
  add("--version", "Print the version and exit.");
  add("--print-completion=SHELL",
      "Print the completion script for bash or zsh and exit (e.g. "
      "source <(ddprun --print-completion=bash)).");
  text +=
      "\nExit status: 0 success; 1 workers failed and the restart budget is spent; 2 usage or\n"
      "configuration error; 3 rendezvous failure; 128+N stopped by signal N.\n"
      "\nDocumentation: README.md and docs/design.md in the source tree, installed in\n"
      "/usr/share/doc/ddprun by the package; man ddprun, ddprun-rdzv, ddp-train.\n";
  return text;
}

Environment WithLaunchDefaults(Environment env) {
  env.emplace(PetName("local-rank-arg"), "local-rank");  // one the user set stays
  return env;
}

absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                             const Environment& env, const HostInfo& host) {
  CommandLine result;
  CLI::App app("ddprun");
  app.set_help_flag();   // our own --help text
  app.prefix_command();  // stop at the training script; everything after it is the script's
  app.allow_windows_style_options(false);

  std::map<std::string, std::string> cli_values;
  std::map<std::string, CLI::Option*> cli_options;
  std::set<std::string> value_spellings = {"--config", "--print-completion"};
  for (const FlagDef& f : kFlags) {
    const std::vector<std::string> spellings = Spellings(f);
    const std::string names = absl::StrJoin(spellings, ",");
    std::string& slot = cli_values[f.name];
    if (f.is_bool) {
      cli_options[f.name] = app.add_flag_callback(names, [&slot] { slot = "true"; });
    } else {
      cli_options[f.name] = app.add_option(names, slot)->allow_extra_args(false);
      value_spellings.insert(spellings.begin(), spellings.end());
    }
  }
  std::string config_file;
  bool want_help = false, want_version = false;
  std::string completion_shell;
  CLI::Option* config_option = app.add_option("--config", config_file);
  CLI::Option* completion_option = app.add_option("--print-completion", completion_shell);
  app.add_flag("-h,--help", want_help);
  app.add_flag("--version", want_version);

  LongOptionSpellings long_options{TorchrunLongOptions(), {}, value_spellings};
  for (const std::string& s : CompletionSpellings()) {
    if (absl::StartsWith(s, "--") && long_options.torchrun.count(s) == 0) {
      long_options.own.insert(s);
    }
  }
  DDPRUN_ASSIGN_OR_RETURN(const std::vector<std::string> expanded,
                          ExpandAbbreviations(args, long_options));
  const std::vector<std::string> split = SplitEmptyValues(expanded, value_spellings);
  std::vector<std::string> reversed(split.rbegin(), split.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  if (config_option->count() > 0 && config_file.empty()) {
    return absl::InvalidArgumentError("--config=: names no file");
  }
  if (completion_option->count() > 0 && completion_shell.empty()) {
    return absl::InvalidArgumentError("--print-completion=: expected bash or zsh");
  }
  if (want_help) {
    result.exit_now = true;
    result.text = HelpText();
    return result;
  }
  if (want_version) {
    result.exit_now = true;
    result.text = absl::StrCat("ddprun ", kVersion, "\n");
    return result;
  }
  if (!completion_shell.empty()) {
    DDPRUN_ASSIGN_OR_RETURN(result.text, CompletionScript(completion_shell, CompletionFlags()));
    result.exit_now = true;
    return result;
  }

  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && absl::StartsWith(rest.front(), "-") && rest.front() != "-") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown flag ", std::vector<std::string>(absl::StrSplit(rest.front(), '='))[0],
        " (see --help)"));
  }

  // Merge: defaults < Slurm < PET_* < YAML < command line. Apply in that order; later wins.
  LaunchOptions& o = result.options;
  std::vector<std::pair<std::string, Sourced>> ordered;
  // torch 2.x's variables for two flags: the weakest explicit source, below PET_ variables.
  for (const auto& [variable, flag] :
       {std::pair{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "shutdown-timeout"},
        std::pair{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "log-line-prefix-template"}}) {
    if (auto it = env.find(variable); it != env.end()) {
      ordered.push_back({flag, {it->second, it->first}});
    }
  }
  for (const FlagDef& f : kFlags) {
    auto it = env.find(PetName(f.name));
    if (it != env.end()) ordered.push_back({f.name, {it->second, it->first}});
  }
  if (!config_file.empty()) {
    o.config_file = config_file;
    DDPRUN_ASSIGN_OR_RETURN(std::vector<ConfigValue> values, LoadYamlConfig(config_file));
    for (const ConfigValue& v : values) {
      const std::string where = absl::StrCat(config_file, ":", v.line, ": ", v.key);
      if (v.key == "script" || v.key == "entrypoint") {
        if (v.shape != ConfigValue::Shape::kScalar) {
          return absl::InvalidArgumentError(
              absl::StrCat(where,
                           ": expected one script or program, not a list or a mapping "
                           "(its arguments go under script-args)"));
        }
        if (rest.empty()) o.entrypoint = v.value;
        continue;
      }
      if (v.key == "script-args" || v.key == "args") {
        if (v.shape == ConfigValue::Shape::kMap) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": expected a list of arguments, not a mapping"));
        }
        if (rest.empty())
          o.entrypoint_args = v.list.empty() ? std::vector<std::string>{v.value} : v.list;
        continue;
      }
      if (FindFlag(v.key) == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(config_file, ":", v.line, ": unknown key '", v.key, "'"));
      }
      ordered.push_back({v.key, {v.value, where}});
    }
  }
  for (const FlagDef& f : kFlags) {
    if (cli_options[f.name]->count() > 0) {
      ordered.push_back({f.name, {cli_values[f.name], absl::StrCat("--", f.name)}});
    }
  }
  // Inside a Slurm job step its defaults go first, below every explicit source (slurm_env.h),
  // and the step's GPUs stand for the host's.
  HostInfo effective_host = host;
  std::vector<FlagValue> given;
  for (const auto& [flag, s] : ordered) given.push_back({flag, s.value, s.where});
  if (SlurmWanted(env, given)) {
    DDPRUN_ASSIGN_OR_RETURN(SlurmStep step, ReadSlurmStep(env));
    DDPRUN_ASSIGN_OR_RETURN(result.slurm, PlanSlurm(step, given));
    effective_host.gpu_count = step.gpus;
    std::vector<std::pair<std::string, Sourced>> slurm;
    for (const FlagValue& f : result.slurm->defaults) slurm.push_back({f.flag, {f.value, f.where}});
    ordered.insert(ordered.begin(), slurm.begin(), slurm.end());
  } else {
    DDPRUN_ASSIGN_OR_RETURN(result.platform, PlanPlatform(env, given));
    if (result.platform) {
      std::vector<std::pair<std::string, Sourced>> platform;
      for (const FlagValue& f : result.platform->defaults) {
        platform.push_back({f.flag, {f.value, f.where}});
      }
      ordered.insert(ordered.begin(), platform.begin(), platform.end());
    }
  }
  for (const auto& [flag, sourced] : ordered) {
    DDPRUN_RETURN_IF_ERROR(Apply(flag, sourced, effective_host, &o));
  }

  if (!rest.empty()) {
    o.entrypoint = rest.front();
    o.entrypoint_args.assign(rest.begin() + 1, rest.end());
  }
  DDPRUN_RETURN_IF_ERROR(Validate(env, &o, &result.warnings));
  return result;
}

}  // namespace ddprun::launcher
