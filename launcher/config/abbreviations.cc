#include "launcher/config/abbreviations.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace ddprun::launcher {
namespace {

std::vector<std::string> StartingWith(const std::set<std::string>& options,
                                      const std::string& prefix) {
  std::vector<std::string> out;
  for (auto it = options.lower_bound(prefix); it != options.end() && absl::StartsWith(*it, prefix);
       ++it) {
    out.push_back(*it);
  }
  return out;
}

// The whole spelling `name` abbreviates, or `name` itself when it abbreviates nothing.
absl::StatusOr<std::string> Expand(const std::string& name, const LongOptionSpellings& s) {
  if (s.torchrun.count(name) > 0 || s.own.count(name) > 0) return name;
  for (const std::set<std::string>* options : {&s.torchrun, &s.own}) {
    const std::vector<std::string> candidates = StartingWith(*options, name);
    if (candidates.size() == 1) return candidates.front();
    if (candidates.size() > 1) {
      return absl::InvalidArgumentError(absl::StrCat("ambiguous flag ", name, ": it could be ",
                                                     absl::StrJoin(candidates, ", "),
                                                     " (see --help)"));
    }
  }
  return name;
}

}  // namespace

const std::set<std::string>& TorchrunLongOptions() {
  static const auto* const kOptions = new std::set<std::string>{"--duplicate-stderr-filters",
                                                                "--duplicate-stdout-filters",
                                                                "--duplicate_stderr_filters",
                                                                "--duplicate_stdout_filters",
                                                                "--event-log-handler",
                                                                "--event_log_handler",
                                                                "--help",
                                                                "--local-addr",
                                                                "--local-ranks-filter",
                                                                "--local_addr",
                                                                "--local_ranks_filter",
                                                                "--log-dir",
                                                                "--log_dir",
                                                                "--logs-specs",
                                                                "--logs_specs",
                                                                "--master-addr",
                                                                "--master-port",
                                                                "--master_addr",
                                                                "--master_port",
                                                                "--max-restarts",
                                                                "--max_restarts",
                                                                "--module",
                                                                "--monitor-interval",
                                                                "--monitor_interval",
                                                                "--nnodes",
                                                                "--no-python",
                                                                "--no_python",
                                                                "--node-rank",
                                                                "--node_rank",
                                                                "--nproc-per-node",
                                                                "--nproc_per_node",
                                                                "--numa-binding",
                                                                "--numa_binding",
                                                                "--rdzv-backend",
                                                                "--rdzv-conf",
                                                                "--rdzv-endpoint",
                                                                "--rdzv-id",
                                                                "--rdzv_backend",
                                                                "--rdzv_conf",
                                                                "--rdzv_endpoint",
                                                                "--rdzv_id",
                                                                "--redirects",
                                                                "--role",
                                                                "--run-path",
                                                                "--run_path",
                                                                "--signals-to-handle",
                                                                "--signals_to_handle",
                                                                "--standalone",
                                                                "--start-method",
                                                                "--start_method",
                                                                "--tee",
                                                                "--virtual-local-rank",
                                                                "--virtual_local_rank"};
  return *kOptions;
}

absl::StatusOr<std::vector<std::string>> ExpandAbbreviations(const std::vector<std::string>& args,
                                                             const LongOptionSpellings& spellings) {
  std::vector<std::string> out;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 2 || a[0] != '-' || a == "--") break;  // the script (or "--") and after
    if (!absl::StartsWith(a, "--")) {                     // a short option: "-m", "-r 3"
      out.push_back(a);
      if (spellings.with_value.count(a) > 0 && i + 1 < args.size()) out.push_back(args[++i]);
      continue;
    }
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq);
    DDPRUN_ASSIGN_OR_RETURN(const std::string whole, Expand(name, spellings));
    out.push_back(eq == std::string::npos ? whole : absl::StrCat(whole, a.substr(eq)));
    // "--flag VALUE": VALUE is not an option, whatever it looks like.
    if (eq == std::string::npos && spellings.with_value.count(whole) > 0 && i + 1 < args.size()) {
      out.push_back(args[++i]);
    }
  }
  out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return out;
}

}  // namespace ddprun::launcher
