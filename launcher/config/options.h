// Everything the agent needs to know, parsed once in main from the command line, a YAML
// config file and PET_* environment variables (cli.h), then passed down read-only.
#ifndef DDPRUN_LAUNCHER_CONFIG_OPTIONS_H_
#define DDPRUN_LAUNCHER_CONFIG_OPTIONS_H_

#include <chrono>
#include <csignal>
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/config/numa_binding.h"
#include "launcher/config/rdzv_backend.h"
#include "launcher/config/rdzv_conf.h"

namespace ddprun::launcher {

// Which of a worker's streams a --redirects / --tee value covers (torchrun's Std: 0 none,
// 1 stdout, 2 stderr, 3 both), for every local rank or per local rank.
struct StdSpec {
  int all = 0;                  // applies to ranks without an entry in `per_rank`
  std::map<int, int> per_rank;  // local rank -> mask
  int For(int local_rank) const {
    auto it = per_rank.find(local_rank);
    return it == per_rank.end() ? all : it->second;
  }
};
inline constexpr int kStdOut = 1;
inline constexpr int kStdErr = 2;

// The signals that stop the workers and then ddprun (exit 128+N), as torchrun handles them;
// --signals-to-handle adds others, which ddprun forwards to the workers instead.
inline constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
inline bool IsStopSignal(int sig) {
  for (int s : kStopSignals) {
    if (s == sig) return true;
  }
  return false;
}

// What a failure does to the workers that did not fail (docs/design.md §6b).
enum class RestartMode {
  kCold,       // every worker of the job is stopped and started again (torchrun's model)
  kInProcess,  // survivors keep running and re-form with replacements (control channel)
};

// A failure that repeats before any progress (rendezvous/api/crash_loop.h).
enum class CrashLoop {
  kStop,   // the second identical failure without progress ends the job (exit 4)
  kRetry,  // restart until --max-restarts is spent, as torchrun does
};

// --preflight (rendezvous/api/preflight.h, docs/design.md §3d).
enum class PreflightMode {
  kAuto,  // on for a multi-node run (--nnodes max above 1) on the c10d or static backend
  kOn,
  kOff,
};

// --preload (launcher/preload/spare_pool.h).
enum class PreloadKind {
  kOff,
  kPython,  // spare interpreters stopped before the script by ddprun's sitecustomize hook
  kNative,  // the --no-python program takes the hand-over itself (--preload=native)
};

enum class EntrypointKind {
  kPythonScript,  // python3 -u script args...
  kPythonModule,  // python3 -u -m module args...
  kBinary,        // --no-python: exec it directly
};

// The longest run id and --local-addr, in bytes: the rendezvous refuses a join field longer
// than this (rendezvous/api/run_config.h, ServerLimits::max_id_length), so the command line does
// too, naming the flag, instead of the server failing the job later.
inline constexpr size_t kMaxRendezvousFieldBytes = 256;

struct LaunchOptions {
  // Nodes and processes.
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc_per_node = 1;
  std::string nproc_per_node_text = "1";  // as given: "4", "auto", "cpu", "gpu"
  int node_rank = -1;                     // -1: not given (the rendezvous assigns one)

  // Rendezvous.
  RdzvBackend rdzv_backend = RdzvBackend::kStatic;  // --rdzv-backend (rdzv_backend.h)
  std::string rdzv_endpoint;                        // host[:port]
  std::string rdzv_id = "none";
  // --rdzv-conf, parsed and validated once by the command line (rdzv_conf.h): everything
  // downstream reads these typed fields, never the key=value text.
  RdzvConf rdzv;
  bool standalone = false;
  // --evict-slow: a member the server names slow is replaced by a spare standing ready.
  bool evict_slow = false;
  // --preflight and --preflight-margin: every node measured before the first round, a node
  // slower than the job's median by more than the margin named (and kept out for a spare).
  PreflightMode preflight = PreflightMode::kAuto;
  double preflight_margin = 0.2;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool master_addr_given = false;
  bool master_port_given = false;
  std::string local_addr;

  // torch.distributed.launch's argument for scripts that parse --local_rank: "" none (torchrun's
  // way), "local_rank" (--local_rank=N, torch 1.x launch) or "local-rank" (--local-rank=N, torch
  // 2.x launch), put right after the script as launch does; --use-env suppresses it, as it does
  // for launch.
  std::string local_rank_arg;
  bool use_env = false;
  // --log-line-prefix-template: the console prefix of each worker's lines (${role_name},
  // ${rank}, ${local_rank}, ${hostname}); empty: [ROLE<local rank>]: with --tee only.
  std::string log_line_prefix_template;
  // --duplicate-stdout-filters / --duplicate-stderr-filters: lines containing any of these are
  // copied to LOG_DIR/RUN_ID/attempt_N/filtered_stdout.log / filtered_stderr.log.
  std::vector<std::string> duplicate_stdout_filters, duplicate_stderr_filters;

  // Restarts and monitoring.
  int max_restarts = 0;
  double monitor_interval_s = 0.1;     // accepted for compatibility; ddprun is event-driven
  std::string start_method = "spawn";  // accepted for compatibility
  std::chrono::milliseconds stop_timeout{10000};  // SIGTERM -> SIGKILL grace per worker group
  RestartMode restart_mode = RestartMode::kCold;  // --restart-mode
  CrashLoop crash_loop = CrashLoop::kStop;        // --crash-loop
  // --health-check: a shell command that must exit 0 before this node joins each round (empty:
  // none), and how long one run may take before it is killed and counts as failed.
  std::string health_check;
  std::chrono::milliseconds health_check_timeout{60000};
  // --gpu-release-timeout: how long a cold restart waits for the previous workers' GPU memory
  // to be released (launcher/health/gpu_release.h); 0: it does not wait.
  std::chrono::milliseconds gpu_release_timeout{30000};
  // --reform-timeout: in-process mode, from a round message to the worker's ready.
  std::chrono::milliseconds reform_timeout{60000};
  std::vector<int> extra_signals;  // --signals-to-handle beyond the four stop signals
  // --signals-to-handle as given; exported to workers as TORCHELASTIC_SIGNALS_TO_HANDLE (torch
  // 2.x's launcher does, and its workers' handlers read it).
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  // --virtual-local-rank: each worker sees LOCAL_RANK=0 and only its own GPU, the local rank's
  // entry of virtual_gpus (CUDA_VISIBLE_DEVICES's entries, else 0..nproc-1; set by the parser).
  bool virtual_local_rank = false;
  // Workers whose stream is shown on ddprun's terminal write to a pseudo-terminal of their own
  // (off with --no-worker-tty).
  bool worker_tty = true;
  // --numa-binding: how each worker is placed on the CPUs near its GPU (numa_binding.h).
  std::optional<NumaMode> numa_binding;
  std::string numa_binding_name;  // as given, for messages
  // --event-log-handler: "null" or "console" (torchrun's end-of-run events on stderr).
  std::string event_log_handler = "null";
  std::vector<std::string> virtual_gpus;
  // --preload: a spare per local rank, warmed up ahead of a start (spare_pool.h). kPython: the
  // spare is the worker's interpreter stopped before the script, importing `preload`;
  // kNative (--preload=native, --no-python programs): the program itself implements the
  // hand-over (docs/design.md §6a). preload_given is the setting as given ("--preload=torch",
  // "PET_PRELOAD=torch", "job.yaml:3: preload=torch"), for messages.
  PreloadKind preload_kind = PreloadKind::kOff;
  std::vector<std::string> preload;  // kPython's modules
  std::string preload_given;

  // Hangs (docs/guide/hangs.md). A hung worker is a failure of the job: stacks, then a restart.
  std::chrono::milliseconds hang_timeout{0};  // --hang-timeout: no sign of life that long
  // --hang-startup-timeout: how long a worker may stay silent after its start (imports, CUDA
  // and NCCL set-up, a checkpoint's load) before it is hung; 0: hang_timeout. Given where
  // (for messages), empty when not given.
  std::chrono::milliseconds hang_startup_timeout{0};
  std::string hang_startup_given;
  bool file_timer = false;  // TORCHELASTIC_ENABLE_FILE_TIMER=1: serve torch's FileTimer
  std::string timer_file;   // TORCHELASTIC_TIMER_FILE; empty: a private path
  std::chrono::milliseconds uninterruptible_timeout{
      0};  // TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT
  bool hang_detection() const {
    return hang_timeout.count() > 0 || file_timer || uninterruptible_timeout.count() > 0;
  }

  // Workers.
  std::string role = "default";
  EntrypointKind entrypoint_kind = EntrypointKind::kPythonScript;
  std::string entrypoint;  // script path, module name or binary
  std::vector<std::string> entrypoint_args;

  // Output.
  std::string log_dir;  // empty: a temporary directory, removed at exit
  StdSpec redirects;
  StdSpec tee;
  std::set<int> local_ranks_filter;  // empty: every local rank shows on the console
  std::set<int> ranks_filter;        // --ranks-filter, global ranks; empty: every rank

  std::string config_file;  // --config, for messages
  bool verbose = true;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONFIG_OPTIONS_H_
