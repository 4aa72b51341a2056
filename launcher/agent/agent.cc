#include "launcher/agent/agent.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/env_variables.h"
#include "common/file_text.h"
#include "common/log.h"
#include "common/signal_names.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/temp_dir.h"
#include "launcher/agent/event_log.h"
#include "launcher/agent/failure_report.h"
#include "launcher/config/rdzv_conf.h"
#include "launcher/config/template_macros.h"
#include "launcher/process/spawn.h"
#include "launcher/process/stray_children.h"
#include "launcher/workers/error_file_relay.h"
#include "launcher/workers/worker_command.h"
#include "launcher/workers/worker_env.h"
#include "python/inprocess_module_py.h"

namespace ddprun::launcher {
namespace {

// nvidia-smi in the agent's PATH, or "" (no NVIDIA driver tools: no GPU memory to wait for).
std::string FindNvidiaSmi(const Environment& env) {
  absl::StatusOr<std::string> found = FindProgramInEnv("nvidia-smi", env);
  return found.ok() ? *found : "";
}

// A hang-up, interrupt or quit signal that was ignored when ddprun started (`nohup ddprun`, or
// `ddprun ... &` from a script: the shell ignores SIGINT and SIGQUIT for background jobs) stays
// ignored, and the workers inherit that. Blocking it for the signalfd would queue it instead
// (a blocked signal is never discarded), and a closing terminal would stop the job that nohup was
// meant to protect (torchrun does: pytorch issue 76894). SIGTERM is always handled: it is how a
// scheduler stops a job.
bool IgnoredAtStart(int sig) {
  if (sig != SIGHUP && sig != SIGINT && sig != SIGQUIT) return false;
  struct sigaction current {};
  return sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN;
}

sigset_t AgentSignalSet(const LaunchOptions& options) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int sig : kStopSignals) {
    if (!IgnoredAtStart(sig)) sigaddset(&set, sig);
  }
  for (int sig : options.extra_signals) sigaddset(&set, sig);
  return set;
}

absl::Status MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat(path, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

void Agent::BlockAgentSignals(const LaunchOptions& options) {
  sigset_t set = AgentSignalSet(options);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A console that goes away must not kill the agent while it still has workers to stop.
  signal(SIGPIPE, SIG_IGN);
}

Agent::Agent(LaunchOptions options, Environment env, HostInfo host)
    : options_(std::move(options)),
      env_(std::move(env)),
      host_(std::move(host)),
      nvidia_smi_(options_.gpu_release_timeout.count() > 0 ? FindNvidiaSmi(env_) : ""),
      state_(options_.nproc_per_node, options_.restart_mode,
             options_.health_check.empty() && nvidia_smi_.empty() ? HealthGate::kNone
                                                                  : HealthGate::kBeforeEachRound),
      hangs_(
          &loop_, options_, [this](const HangVerdict& v) { OnHang(v); },
          [this](const std::vector<LocalProgress>& p) { ReportProgress(p, false); },
          [this](int lr, int64_t step) { OnStepReport(lr, step); }) {
  SetLogSink(&stderr_writer_);  // our lines stay in order with the workers' stderr
}

Agent::~Agent() {
  group_.reset();
  KillWhatWorkersLeft();
  for (int fd : filtered_fds_) {
    if (fd >= 0) close(fd);
  }
  if (signal_fd_ >= 0) close(signal_fd_);
  if (events_fd_ >= 0) close(events_fd_);
  std::error_code ec;
  hangs_.ClosePipes();  // their folder is not listable: removed by its owner first
  if (!ipc_dir_.empty()) std::filesystem::remove_all(ipc_dir_, ec);
  if (log_root_is_temp_ && !log_root_.empty()) {
    if (stacks_taken_) {
      // Evidence of a hang outlives the job even without --log-dir.
      LogInfo(absl::StrCat("stacks of hung workers kept in ", log_root_));
    } else {
      std::filesystem::remove_all(log_root_, ec);
    }
  }
  // Our last lines behind the workers' output, then straight to stderr again (the writers are
  // members, destroyed after this body, and still flush what they hold).
  stdout_writer_.FlushFor(std::chrono::seconds(2));
  stderr_writer_.FlushFor(std::chrono::seconds(2));
  SetLogSink(nullptr);
}

absl::Status Agent::Prepare() {
  // Orphaned grandchildren of workers are re-parented to us, not to init, so we can reap them
  // and no zombie outlives the job.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (absl::Status s = PlanNumaBinding(); !s.ok()) return s;
  // Before the rendezvous (which may start gRPC threads): the guard is a plain fork.
  if (absl::Status s = guard_.Start(); !s.ok()) return s;

  auto setup = SetUpRendezvous(options_, host_, &loop_);
  if (!setup.ok()) return setup.status();
  setup_ = std::move(*setup);
  rendezvous_ = setup_.rendezvous.get();
  run_id_ = setup_.run_id;

  if (!options_.log_dir.empty()) {
    if (auto s = MakeDirs(options_.log_dir); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--log-dir=", s.message()));
    }
    // Never overwrite the logs of an earlier job with the same run id.
    log_root_ = absl::StrCat(options_.log_dir, "/", run_id_);
    for (int n = 2; std::filesystem::exists(log_root_); ++n) {
      log_root_ = absl::StrCat(options_.log_dir, "/", run_id_, "-", n);
    }
    if (auto s = MakeDirs(log_root_); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--log-dir=", s.message()));
    }
  } else {
    absl::StatusOr<std::string> dir = MakeTempDir("ddprun");
    if (!dir.ok()) return dir.status();
    log_root_ = *std::move(dir);
    log_root_is_temp_ = true;
  }

  timeline_ = std::make_unique<RunTimeline>(run_id_, host_.hostname);
  if (!options_.log_dir.empty()) {
    const std::string events = absl::StrCat(log_root_, "/events.jsonl");
    events_fd_ = open(events.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (events_fd_ < 0) LogWarning(absl::StrCat(events, ": ", strerror(errno)));
  }

  // The step reports' pipe (the goodput ledger, hang detection), the FileTimer's and the
  // control socket live in a private directory.
  absl::StatusOr<std::string> dir = MakeTempDir("ddprun-ipc");
  if (!dir.ok()) return dir.status();
  ipc_dir_ = *std::move(dir);
  if (absl::Status s = hangs_.Start(ipc_dir_); !s.ok()) return s;
  if (absl::Status s = StartInProcessRounds(); !s.ok()) return s;
  worker_attempt_.assign(options_.nproc_per_node, 0);

  if (absl::Status s = StartSpares(); !s.ok()) return s;

  if (!nvidia_smi_.empty()) {
    GpuReleaseOptions gpu;
    gpu.nvidia_smi = nvidia_smi_;
    gpu.timeout = options_.gpu_release_timeout;
    gpu.env = WithoutAgentOnlyVariables(env_);
    gpu_release_ = std::make_unique<GpuReleaseWait>(&loop_, std::move(gpu));
  }
  if (!options_.health_check.empty()) {
    HealthCheckOptions check;
    check.command = options_.health_check;
    check.timeout = options_.health_check_timeout;
    check.env = WithoutAgentOnlyVariables(env_);
    health_ = std::make_unique<HealthCheck>(&loop_, std::move(check));
    health_give_up_after_ = options_.rdzv.timeouts.join_timeout;
  }

  sigset_t set = AgentSignalSet(options_);
  signal_fd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) return absl::InternalError(absl::StrCat("signalfd: ", strerror(errno)));
  loop_.AddFd(signal_fd_, EPOLLIN, [this](uint32_t) { OnSignals(); });
  return absl::OkStatus();
}

int Agent::Run() {
  started_ = std::chrono::steady_clock::now();
  ledger_ = std::make_unique<GoodputLedger>(started_);
  if (absl::Status s = Prepare(); !s.ok()) {
    LogError(s.message());
    return s.code() == absl::StatusCode::kInvalidArgument ||
                   s.code() == absl::StatusCode::kUnimplemented
               ? kExitUsage
               : kExitRendezvous;
  }
  {
    explainer_ = std::make_unique<DeathExplainer>(ReadVariable(env_, kKernelLogVariable));
    if (!explainer_->readable() && Verbose()) {
      LogInfo(
          absl::StrCat("a worker killed by a signal will have a cause only from its memory "
                       "cgroup's OOM kill count: ",
                       explainer_->unreadable_because()));
    }
    DrainKernelLog();
  }
  if (ShouldDefaultOmpThreads(env_, options_.nproc_per_node)) {
    LogWarning(
        "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
        "avoid your system being overloaded, please further tune the variable for optimal "
        "performance in your application as needed.");
  }
  rendezvous::NodeInfo& node = node_;
  node.run_id = run_id_;
  node.hostname = host_.hostname;
  node.node_id = absl::StrCat(host_.hostname, "_", getpid(), "_", RandomHex(4));
  node.min_nodes = options_.min_nodes;
  node.max_nodes = options_.max_nodes;
  node.max_restarts = options_.max_restarts;
  node.nproc_per_node = options_.nproc_per_node;
  node.requested_node_rank = options_.node_rank;
  node.local_addr = options_.local_addr;
  node.master_port = setup_.store != nullptr ? setup_.store->port() : 0;
  RecordStep(StepEvent{Step::kJoining});
  if (state_.phase() == AgentStateMachine::Phase::kSittingOut) {
    CheckReadiness();  // the join waits for it
  } else {
    joined_ = true;
    rendezvous_->Join(node, this);
  }
  loop_.Run();
  return exit_code_;
}

absl::Status Agent::PlanNumaBinding() {
  if (!options_.numa_binding.has_value()) return absl::OkStatus();
  const std::string flag = absl::StrCat("--numa-binding=", options_.numa_binding_name, ": ");
  auto topology = NumaTopology::Read(ReadVariable(env_, kSysfsRootVariable));  // a test hook
  if (!topology.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, topology.status().message()));
  }
  auto visible = env_.find("CUDA_VISIBLE_DEVICES");
  auto gpus =
      GpuIndexOfLocalRanks(visible != env_.end() ? visible->second : "", options_.nproc_per_node);
  if (!gpus.ok()) return gpus.status();
  const std::set<int> allowed = AllowedCpus();
  worker_cpus_.clear();
  for (int lr = 0; lr < options_.nproc_per_node; ++lr) {
    auto cpus = topology->CpusFor((*gpus)[lr], *options_.numa_binding, allowed);
    if (!cpus.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, "local rank ", lr, ": ", cpus.status().message()));
    }
    LogInfo(absl::StrCat("numa binding (", options_.numa_binding_name, "): local rank ", lr,
                         " -> GPU ", (*gpus)[lr], " (", topology->gpu_addresses()[(*gpus)[lr]],
                         "): CPUs ", FormatCpuList(*cpus)));
    worker_cpus_.push_back(*std::move(cpus));
  }
  return absl::OkStatus();
}

WorkerEnvSpec Agent::EnvSpec(int lr) const {
  WorkerEnvSpec spec;
  spec.run_id = run_id_;
  spec.role = options_.role;
  spec.local_rank = lr;
  spec.local_world_size = options_.nproc_per_node;
  spec.max_restarts = options_.max_restarts;
  spec.signals_to_handle = options_.signals_to_handle;
  if (options_.virtual_local_rank) spec.virtual_gpu = options_.virtual_gpus.at(lr);
  return spec;
}

absl::Status Agent::StartInProcessRounds() {
  if (options_.restart_mode != RestartMode::kInProcess) return absl::OkStatus();
  InProcessRounds::Hooks hooks;
  hooks.local_rank_of_pid = [this](pid_t pid) {
    return group_ ? group_->LocalRankOfDescendant(pid) : -1;
  };
  hooks.worker_pid = [this](int lr) { return group_ ? group_->Pid(lr) : 0; };
  hooks.on_speaks = [this](int lr) { state_.OnWorkerSpeaks(lr); };
  hooks.round_running = [this] { return state_.phase() == AgentStateMachine::Phase::kRunning; };
  hooks.kill_worker = [this](int lr) {
    if (group_) group_->KillWorker(lr);
  };
  hooks.on_all_ready = [this](int64_t round, int64_t step) {
    StepEvent restored{Step::kStateRestored};
    restored.round = round;
    restored.detail = absl::StrCat("step ", step);
    restored.state_step = step;
    RecordStep(restored);
  };
  // The Python module (python/ddprun_inprocess.py, compiled in) goes on the workers'
  // PYTHONPATH from the private directory: the version that speaks this agent's protocol.
  module_dir_ = absl::StrCat(ipc_dir_, "/python");
  if (absl::Status s = MakeDirs(module_dir_); !s.ok()) return s;
  const std::string module = absl::StrCat(module_dir_, "/", python::kInProcessModuleFileName);
  const int fd = open(module.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const bool written = fd >= 0 && WriteAll(fd, python::kInProcessModuleSource);
  if (fd >= 0) close(fd);
  if (!written) return absl::InternalError(absl::StrCat(module, ": ", strerror(errno)));
  auto rounds = InProcessRounds::Start(&loop_, options_.nproc_per_node, options_.reform_timeout,
                                       absl::StrCat(ipc_dir_, "/control"), std::move(hooks));
  if (!rounds.ok()) return rounds.status();
  reform_ = *std::move(rounds);
  return absl::OkStatus();
}

std::string Agent::WorkerErrorFile(int lr) const {
  const int attempt =
      lr >= 0 && lr < static_cast<int>(worker_attempt_.size()) ? worker_attempt_[lr] : attempt_;
  return ErrorFilePath(attempt, lr);
}

SpawnRequest Agent::WorkerSpawn(int lr, Environment env) const {
  SpawnRequest spawn;
  spawn.env = std::move(env);
  hangs_.AddWorkerEnv(lr, options_.entrypoint_kind != EntrypointKind::kBinary, &spawn.env);
  if (reform_) {
    spawn.env[control::kControlSocketEnv] = reform_->socket_path();
    std::string& path = spawn.env["PYTHONPATH"];
    path = path.empty() ? module_dir_ : absl::StrCat(module_dir_, ":", path);
  }
  WorkerCommand command = BuildWorkerCommand(options_, env_, lr);
  spawn.program = std::move(command.program);
  spawn.argv = std::move(command.argv);
  if (!worker_cpus_.empty()) spawn.cpus = worker_cpus_[lr];
  return spawn;
}

absl::Status Agent::StartSpares() {
  if (options_.preload_kind == PreloadKind::kOff) return absl::OkStatus();
  std::vector<SpawnRequest> templates;
  for (int lr = 0; lr < options_.nproc_per_node; ++lr) {
    templates.push_back(WorkerSpawn(lr, BuildSpareEnv(env_, EnvSpec(lr))));
  }
  const SpareHook hook = options_.preload_kind == PreloadKind::kNative
                             ? SpareHook::kNativeProgram
                             : SpareHook::kPythonSitecustomize;
  spares_ = std::make_unique<SparePool>(&loop_, &guard_, hook, options_.preload);
  return spares_->Start(std::move(templates));
}

std::string Agent::ErrorFilePath(int attempt, int local_rank) const {
  return absl::StrCat(log_root_, "/attempt_", attempt, "/", local_rank, "/error.json");
}

void Agent::RelayErrorFileToParent(const std::string& worker_file, const WorkerExit& cause) {
  auto parent = env_.find("TORCHELASTIC_ERROR_FILE");
  if (parent == env_.end() || parent->second.empty()) return;
  // torch's ProcessFailure.exitcode: the exit code, or minus the signal that killed it.
  const int code = cause.signal != 0 ? -cause.signal : cause.exit_code;
  const absl::Status s = RelayErrorFile(worker_file, parent->second, code);
  if (!s.ok() && !absl::IsNotFound(s)) LogWarning(s.message());
}

void Agent::OpenFilteredLogs() {
  const std::vector<std::string>* filters[2] = {&options_.duplicate_stdout_filters,
                                                &options_.duplicate_stderr_filters};
  const char* names[2] = {"filtered_stdout.log", "filtered_stderr.log"};
  for (int i = 0; i < 2; ++i) {
    if (filtered_fds_[i] >= 0) close(filtered_fds_[i]);
    filtered_fds_[i] = -1;
    if (filters[i]->empty()) continue;
    const std::string dir = absl::StrCat(log_root_, "/attempt_", attempt_);
    if (absl::Status s = MakeDirs(dir); !s.ok()) LogWarning(s.message());
    const std::string path = absl::StrCat(dir, "/", names[i]);
    filtered_fds_[i] = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (filtered_fds_[i] < 0) LogWarning(absl::StrCat(path, ": ", strerror(errno)));
  }
}

WorkerLaunch Agent::MakeLaunch(int lr, const rendezvous::Assignment& a) {
  worker_attempt_[lr] = attempt_;
  exits_[lr].reset();
  const std::string dir = absl::StrCat(log_root_, "/attempt_", attempt_, "/", lr);
  if (absl::Status s = MakeDirs(dir); !s.ok()) LogWarning(s.message());
  WorkerEnvSpec spec = EnvSpec(lr);
  spec.error_file = ErrorFilePath(attempt_, lr);
  unlink(spec.error_file.c_str());  // a stale file must not be mistaken for this attempt's

  WorkerLaunch launch;
  launch.local_rank = lr;
  launch.rank = a.rank_offset + lr;
  launch.spawn = WorkerSpawn(lr, BuildWorkerEnv(env_, spec, a));
  launch.python = options_.entrypoint_kind != EntrypointKind::kBinary;
  launch.stacks_path = absl::StrCat(dir, "/stacks.txt");

  // Console and log files, as torchrun's --redirects / --tee / --local-ranks-filter say.
  const bool visible =
      (options_.local_ranks_filter.empty() || options_.local_ranks_filter.count(lr) > 0) &&
      (options_.ranks_filter.empty() || options_.ranks_filter.count(launch.rank) > 0);
  const int redirect = options_.redirects.For(lr);
  const int tee = options_.tee.For(lr);
  const bool always_log = !options_.log_dir.empty();
  const bool templated = !options_.log_line_prefix_template.empty();
  const std::string prefix =
      templated
          ? SubstituteTemplate(options_.log_line_prefix_template,
                               LogLinePrefixValues(options_.role, launch.rank, lr, host_.hostname))
          : absl::StrCat("[", options_.role, lr, "]:");
  auto configure = [&](int bit, int console_fd, OutputStream::Config* config, std::string* log_path,
                       int* tty_of, const char* name) {
    const bool redirected = (redirect & bit) != 0 && (tee & bit) == 0;
    config->console_fd = visible && !redirected ? console_fd : -1;
    config->console =
        isatty(console_fd) ? OutputStream::Console::kTerminal : OutputStream::Console::kStream;
    config->console_writer = console_fd == 1 ? &stdout_writer_ : &stderr_writer_;
    // A stream shown as is on ddprun's terminal gets a terminal of its own (as under torchrun
    // without --tee, where the worker writes to that terminal itself); --tee gives pipes there.
    if (options_.worker_tty && config->console_fd >= 0 && (tee & bit) == 0 && isatty(console_fd)) {
      *tty_of = console_fd;
    }
    // An explicit template prefixes every console line; the default one only with --tee.
    if (templated || (tee & bit) != 0) config->prefix = prefix;
    if (always_log || ((redirect | tee) & bit) != 0) *log_path = absl::StrCat(dir, "/", name);
    config->filtered_fd = filtered_fds_[bit == kStdOut ? 0 : 1];
    config->filters =
        bit == kStdOut ? options_.duplicate_stdout_filters : options_.duplicate_stderr_filters;
    config->filtered_prefix = absl::StrCat("[", options_.role, lr, "]:");
  };
  configure(kStdOut, 1, &launch.stdout_config, &launch.stdout_log, &launch.stdout_tty_of,
            "stdout.log");
  configure(kStdErr, 2, &launch.stderr_config, &launch.stderr_log, &launch.stderr_tty_of,
            "stderr.log");
  return launch;
}

void Agent::StartWorkers(const rendezvous::Assignment& a) {
  if (const std::string glob = StacksGlob(); !glob.empty()) {
    std::string where;
    if (const auto& root = state_.previous_root_cause(); root.has_value() && !root->hang.empty()) {
      const std::vector<std::string> frames = group_->InnermostFrames(root->local_rank, 3);
      if (!frames.empty()) where = absl::StrCat("; rank ", root->rank, " was at ", frames[0]);
    }
    LogWarning(absl::StrCat("stacks of the hung attempt: ", glob, where));
  }
  current_ = a;
  ++attempt_;
  // A cold start of a one-node job: every worker of the round is new and this agent's, so the
  // store it finds can be new too (the previous workers may have left keys under the same
  // /worker/attempt_N prefix when only the restart count stayed). Not with several nodes: the
  // other nodes' workers of this round may already have written their keys (they start as soon
  // as their own predecessors stopped), so there the store keeps the job's keys under their
  // attempt prefixes, as torchrun's does. Not in in-process mode: survivors may already be
  // writing this round's keys (under its own prefix).
  if (setup_.store != nullptr && !reform_ && options_.max_nodes == 1) setup_.store->Clear();
  exits_.assign(options_.nproc_per_node, std::nullopt);
  OpenFilteredLogs();
  std::vector<WorkerLaunch> launches;
  const int nproc = options_.nproc_per_node;
  for (int lr = 0; lr < nproc; ++lr) launches.push_back(MakeLaunch(lr, a));
  if (group_) KillWhatWorkersLeft();  // the previous group's detached processes
  if (reform_) {
    reform_->OnGroupReplaced();
    reform_->BeginRound(a, {});  // every worker gets its round message in reply to its hello
  }
  group_ = std::make_unique<WorkerGroup>(&loop_, this, options_.stop_timeout, &guard_,
                                         hangs_.enabled() ? FindStackTool(env_) : std::nullopt,
                                         spares_.get());
  LogInfo(absl::StrCat("round ", a.round, ": starting ", nproc, " worker(s), ", DescribeRound(a)));
  LaunchInGroup(std::move(launches), "worker(s)");
  const std::vector<pid_t> pids = group_->LivePids();
  started_worker_pids_ = std::set<pid_t>(pids.begin(), pids.end());
  // Their memory cgroups' OOM counts before they can allocate anything.
  if (explainer_ != nullptr) explainer_->Watch(pids);
  WorkersStarted(a, nproc, /*kept=*/-1);
}

std::string Agent::DescribeRound(const rendezvous::Assignment& a) const {
  return absl::StrCat("ranks ", a.rank_offset, "-", a.rank_offset + options_.nproc_per_node - 1,
                      " of ", a.world_size, " (node ", a.group_rank, " of ", a.group_world_size,
                      "), master ", a.master_addr, ":", a.master_port,
                      a.restart_count > 0 ? absl::StrCat(", restart ", a.restart_count) : "");
}

void Agent::LaunchInGroup(std::vector<WorkerLaunch> launches, const char* what) {
  const int handed_before = spares_ ? spares_->handed_over() : 0;
  const size_t count = launches.size();
  group_->Start(std::move(launches));
  if (spares_) {
    LogInfo(absl::StrCat("preload: ", spares_->handed_over() - handed_before, " of ", count, " ",
                         what, " started from spares"));
  }
}

void Agent::WorkersStarted(const rendezvous::Assignment& a, int started, int kept) {
  hangs_.OnGroupStarted(group_.get());
  StepEvent step{Step::kWorkersStarted};
  step.round = a.round;
  step.workers = started;
  step.kept = kept;
  step.restart_count = a.restart_count;
  RecordStep(step);
  rendezvous_->ReportGroupState(a.round, rendezvous::GroupState::kRunning, std::nullopt);
}

void Agent::ReformWorkers(const rendezvous::Assignment& a, const std::vector<int>& start) {
  current_ = a;
  ++attempt_;
  std::vector<WorkerLaunch> launches;
  std::vector<int> kept;
  for (int lr = 0; lr < options_.nproc_per_node; ++lr) {
    if (std::find(start.begin(), start.end(), lr) != start.end()) {
      launches.push_back(MakeLaunch(lr, a));
    } else {
      kept.push_back(lr);
    }
  }
  LogInfo(absl::StrCat("round ", a.round, ": in-process recovery, ", kept.size(),
                       " worker(s) kept, ", launches.size(), " started; ", DescribeRound(a)));
  reform_->BeginRound(a, kept, start);
  if (!launches.empty()) {
    KillWhatWorkersLeft();  // what the failed workers detached
    LaunchInGroup(std::move(launches), "replacement(s)");
    if (explainer_ != nullptr) explainer_->Watch(group_->LivePids());
  }
  WorkersStarted(a, static_cast<int>(start.size()), static_cast<int>(kept.size()));
}

void Agent::Execute(const std::vector<AgentAction>& actions) {
  for (const AgentAction& action : actions) {
    switch (action.type) {
      case AgentAction::Type::kStartWorkers:
        StartWorkers(action.assignment);
        break;
      case AgentAction::Type::kAbortRound:
        hangs_.OnGroupStopping();
        LogInfo(absl::StrCat("round ", action.round, " is over (", action.message,
                             "); in-process recovery: the surviving workers wait for the next"));
        reform_->Abort(action.round, action.message);
        {
          StepEvent aborted{Step::kRoundAborted};
          aborted.round = action.round;
          RecordStep(aborted);
        }
        break;
      case AgentAction::Type::kReformWorkers:
        ReformWorkers(action.assignment, action.local_ranks);
        break;
      case AgentAction::Type::kStopWorkers:
        hangs_.OnGroupStopping();
        if (group_ && action.local_rank < 0 && group_->live() > 0 && !stopping_) {
          stopping_ = true;
          RecordStep(StepEvent{Step::kStopBegun});
        }
        if (group_ && action.stop_mode == StopMode::kTakeStacksFirst) {
          StackPlan plan;
          plan.reason = action.failure.hang.empty() ? action.message
                                                    : absl::StrCat("rank ", action.failure.rank,
                                                                   " hung: ", action.failure.hang);
          if (action.hang_signal > 0) {
            plan.signal_rank = action.failure.local_rank;
            plan.signal = action.hang_signal;
          }
          plan.only_local_rank = action.local_rank;
          stacks_taken_ = true;
          LogWarning(absl::StrCat(
              "taking the stacks of this node's workers (",
              group_->stack_tool() ? group_->stack_tool()->name : "no eu-stack or gdb installed",
              "), then stopping them: ", plan.reason));
          group_->StopWithStacks(plan);
        } else if (group_) {
          group_->Stop();
        }
        break;
      case AgentAction::Type::kKillWorkers:
        if (group_) group_->Kill();
        break;
      case AgentAction::Type::kReportFailed: {
        const WorkerExit& e = action.failure;
        rendezvous::WorkerFailure failure;
        failure.hostname = host_.hostname;
        failure.rank = e.rank;
        failure.local_rank = e.local_rank;
        failure.pid = e.pid;
        failure.exit_code = e.exit_code;
        failure.signal = e.signal;
        failure.hang = !e.hang.empty();
        failure.cause_kind = failure.hang          ? rendezvous::kFailureHang
                             : failure.signal != 0 ? DeathCauseLabel(e.cause.kind)
                                                   : rendezvous::kFailureExit;
        failure.cause = e.cause.text;
        std::vector<std::string> tail =
            group_ ? group_->StderrTail(e.local_rank) : std::vector<std::string>{};
        const std::string killed_why = reform_ ? reform_->KillReason(e.local_rank) : "";
        if (failure.hang) {
          failure.message = e.hang;
        } else if (!killed_why.empty()) {
          failure.message = killed_why;
        } else if (auto err = ReadErrorFile(WorkerErrorFile(e.local_rank))) {
          failure.message = Abbreviate(err->message);
        } else if (group_ && !group_->StartError(e.local_rank).empty()) {
          failure.message = group_->StartError(e.local_rank);
        } else if (!tail.empty()) {
          failure.message = tail.back();
        }
        // A kill from outside or by the OOM killer is no program's deterministic failure: it
        // never counts towards the crash-loop breaker (issue 43, D7).
        if (options_.crash_loop == CrashLoop::kStop && !failure.hang &&
            (failure.signal == 0 || MayRepeatByItself(e.cause.kind, failure.signal))) {
          // The cause's kind, not its text: a fault's address differs from one attempt to the next.
          failure.signature = absl::StrCat(
              failure.signal != 0 ? absl::StrCat("signal ", SignalName(failure.signal))
                                  : absl::StrCat("exit code ", failure.exit_code),
              " (", failure.cause_kind, ")", failure.message.empty() ? "" : ": ", failure.message);
          failure.made_progress = progress_in_attempt_;
        }
        StepEvent detected{Step::kFailureDetected};
        detected.cause = failure.hang          ? kCauseHang
                         : failure.signal != 0 ? kCauseWorkerSignal
                                               : kCauseWorkerExit;
        detected.rank = e.rank;
        detected.host = host_.hostname;
        detected.detail = failure.hang ? absl::StrCat("hung (", e.hang, ")")
                          : failure.signal != 0
                              ? absl::StrCat("was killed by ", SignalName(failure.signal),
                                             failure.cause.empty() ? "" : ": ", failure.cause)
                              : absl::StrCat("exited ", failure.exit_code);
        detected.round = action.round;
        RecordStep(detected);
        if (!failure.hang) {
          LogWarning(absl::StrCat("worker rank ", e.rank, " (local rank ", e.local_rank, ", pid ",
                                  e.pid, ") failed with ", DescribeExit(e),
                                  failure.message.empty() ? "" : ": ", failure.message));
        }
        rendezvous_->ReportGroupState(action.round, rendezvous::GroupState::kFailed, failure);
        break;
      }
      case AgentAction::Type::kReportSucceeded:
        rendezvous_->ReportGroupState(action.round, rendezvous::GroupState::kSucceeded,
                                      std::nullopt);
        break;
      case AgentAction::Type::kLeave:
        rendezvous_->Leave(action.message);
        break;
      case AgentAction::Type::kCheckHealth:
        CheckReadiness();
        break;
      case AgentAction::Type::kStepOut:
        if (joined_) rendezvous_->StepOut(action.message);
        break;
      case AgentAction::Type::kStepIn:
        if (!joined_) {
          joined_ = true;
          rendezvous_->Join(node_, this);
        } else {
          LogInfo("the health check passes again: this node rejoins the run as a new node");
          rendezvous_->StepIn();
        }
        break;
      case AgentAction::Type::kExit:
        if (action.exit_code == kExitSuccess && setup_.grpc != nullptr) {
          // Let the success report reach the server before the stream goes away: exiting at
          // once would cancel the stream and read as a lost node. The server answers with a
          // close; wait for it, briefly.
          awaiting_close_ = true;
          loop_.AddTimerAfter(std::chrono::seconds(2), [this, action] {
            if (awaiting_close_) Finish(action.exit_code, action.message);
          });
        } else {
          Finish(action.exit_code, action.message);
        }
        break;
    }
  }
}

void Agent::Finish(int exit_code, const std::string& reason) {
  awaiting_close_ = false;
  exit_code_ = exit_code;
  if (exit_code == kExitWorkersFailed || exit_code == kExitCrashLoop) {
    FailureReport report;
    report.headline = reason;
    report.hostname = host_.hostname;
    report.restarts_used = current_.restart_count;
    report.max_restarts = options_.max_restarts;
    report.root_cause = state_.root_cause();
    report.other_failures = state_.other_failures();
    if (report.root_cause.has_value()) {
      const int lr = report.root_cause->local_rank;
      report.error_file = WorkerErrorFile(lr);
      report.error = ReadErrorFile(report.error_file);
      RelayErrorFileToParent(report.error_file, *report.root_cause);
      if (group_) {
        report.stderr_tail = group_->StderrTail(lr);
        report.start_error = group_->StartError(lr);
        report.stacks_file = group_->StacksPath(lr);
        report.innermost_frames = group_->InnermostFrames(lr, 6);
      }
    }
    report.straggler = straggler_;
    if (const std::string glob = StacksGlob(); !glob.empty() && report.stacks_file.empty()) {
      report.stacks_file = absl::StrCat(glob, " (this node's workers)");
    }
    stderr_writer_.Write(FormatFailureReport(report));
  } else if (exit_code == kExitRendezvous) {
    LogError(absl::StrCat("rendezvous failed: ", reason));
  } else if (exit_code >= kExitSignalBase) {
    LogInfo(absl::StrCat("workers stopped; exiting with ", exit_code, " (", reason, ")"));
  }
  spares_.reset();  // no start follows; a node that keeps serving others needs no spares
  StepEvent closed{Step::kClosed};
  closed.detail = absl::StrCat("exit ", exit_code, ": ", reason);
  if (ledger_ != nullptr)
    closed.effective_ratio = ledger_->EffectiveRatio(std::chrono::steady_clock::now());
  RecordStep(closed);
  if (options_.event_log_handler == "console") WriteEventLog(exit_code, reason);
  if (setup_.grpc != nullptr && setup_.grpc->hosting() && exit_code == kExitSuccess) {
    StopLoopWhenServerIdle();
  } else {
    loop_.Stop();
  }
}

void Agent::WriteEventLog(int exit_code, const std::string& reason) {
  RunFacts run;
  run.run_id = run_id_;
  run.role = options_.role;
  run.hostname = host_.hostname;
  run.rdzv_backend = std::string(RdzvBackendName(options_.rdzv_backend));
  run.entry_point = std::filesystem::path(options_.entrypoint).filename().string();
  run.group_rank = current_.group_rank;
  run.group_world_size = current_.group_world_size;
  run.world_size = current_.world_size;
  run.agent_restarts = current_.restart_count;
  run.total_run_time =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_)
          .count();
  run.timestamp_ms = UnixMillisNow();
  // As torch: the workers' events only when the agent's run returned (the group succeeded or
  // failed for good); a signal or a rendezvous error ends it with the agent's FAILED alone.
  const bool run_returned =
      exit_code == kExitSuccess || exit_code == kExitWorkersFailed || exit_code == kExitCrashLoop;
  std::string out;
  if (run_returned && group_ != nullptr) {
    auto failed = [&](int local_rank) {
      if (state_.root_cause().has_value() && state_.root_cause()->local_rank == local_rank) {
        return true;
      }
      for (const WorkerExit& e : state_.other_failures()) {
        if (e.local_rank == local_rank) return true;
      }
      return false;
    };
    for (int lr = 0; lr < static_cast<int>(exits_.size()); ++lr) {
      WorkerEventFacts w;
      w.local_rank = lr;
      w.global_rank = current_.rank_offset + lr;
      w.pid = group_->Pid(lr);
      const std::optional<WorkerExit>& e = exits_[lr];
      if (e.has_value() && e->signal == 0) w.exit_code = e->exit_code;
      if (exit_code == kExitSuccess) {
        w.state = "SUCCEEDED";
      } else if (failed(lr)) {
        w.state = "FAILED";
        w.raw_error = ReadBoundedFile(WorkerErrorFile(lr), kMaxErrorFileBytes).value_or("");
        if (w.raw_error.empty() && e.has_value()) {
          w.raw_error = nlohmann::json({{"message", DescribeExit(*e)}}).dump();
        }
      } else {
        w.state = "TERMINATED";
      }
      absl::StrAppend(&out, FormatWorkerEvent(run, w), "\n");
    }
  }
  absl::StrAppend(&out, FormatAgentEvent(run, run_returned, run_returned ? "" : reason), "\n");
  stderr_writer_.Write(std::move(out));
}

void Agent::StopLoopWhenServerIdle() {
  const int others = setup_.grpc->OtherAgents(run_id_);
  if (others == 0) {
    loop_.Stop();
    return;
  }
  if (!waiting_for_peers_) {
    waiting_for_peers_ = true;
    LogInfo("this node is done; serving the rendezvous until the other nodes finish");
  }
  // Peers may run for hours after this node: ask a few times a second, not continuously.
  loop_.AddTimerAfter(std::chrono::milliseconds(200), [this] { StopLoopWhenServerIdle(); });
}

void Agent::OnAssignment(const rendezvous::Assignment& assignment) {
  StepEvent complete{Step::kRoundComplete};
  complete.round = assignment.round;
  complete.world_size = assignment.world_size;
  complete.group_rank = assignment.group_rank;
  complete.restart_count = assignment.restart_count;
  RecordStep(complete);
  Execute(state_.OnAssignment(assignment));
}

void Agent::OnRestart(const std::string& reason,
                      const std::optional<rendezvous::HangNotice>& hang) {
  LogInfo(reason);
  if (!failure_in_cycle_) {  // else the restart is the consequence of this node's own failure
    StepEvent detected{Step::kFailureDetected};
    detected.cause = CauseOfRestart(reason, hang.has_value());
    detected.detail = reason;
    RecordStep(detected);
  }
  NoteHangNotice(hang);
  Execute(state_.OnRestart(reason, hang));
}

void Agent::OnReconnecting(const std::string& why) { LogInfo(why); }

void Agent::OnResumed(int64_t round) {
  StepEvent resumed{Step::kResumed};
  resumed.round = round;
  RecordStep(resumed);
  LogInfo(absl::StrCat("re-registered with the rendezvous: round ", round,
                       " goes on, no worker restarted"));
}

void Agent::OnClosed(const absl::Status& status,
                     const std::optional<rendezvous::HangNotice>& hang) {
  if (awaiting_close_) {
    awaiting_close_ = false;
    Finish(kExitSuccess, "all workers exited 0");
    return;
  }
  NoteHangNotice(hang);
  Execute(state_.OnClosed(status, hang));
}

void Agent::CheckReadiness() {
  if (gpu_release_ != nullptr && gpu_release_->waiting()) return;
  if (gpu_release_ != nullptr && !started_worker_pids_.empty()) {
    if (group_) KillWhatWorkersLeft();  // a detached process may hold GPU memory too
    gpu_release_->Wait(std::exchange(started_worker_pids_, {}), [this](const GpuReleaseResult& r) {
      NoteGpuRelease(r);
      RunHealthCheck();
    });
    return;
  }
  RunHealthCheck();
}

void Agent::NoteGpuRelease(const GpuReleaseResult& r) {
  if (!r.query_failed.empty()) {
    LogWarning(absl::StrCat("nvidia-smi could not list the GPU processes (", r.query_failed,
                            "): not waiting for the previous workers' GPU memory"));
  } else if (!r.released) {
    LogWarning(absl::StrCat(
        "the previous workers' GPU memory is still held after ", SecondsText(r.waited),
        " (--gpu-release-timeout): ", DescribeHeld(r.held), "; starting the new workers anyway"));
  } else if (r.waited >= GpuReleaseWait::kPoll) {
    LogInfo(absl::StrCat("waited ", SecondsText(r.waited),
                         " until the previous workers' GPU memory was released"));
  }
}

void Agent::RunHealthCheck() {
  if (health_ == nullptr) {  // the GPU memory was all there was to wait for
    loop_.Post([this] { Execute(state_.OnHealthChecked(true, "")); });
    return;
  }
  if (health_->running()) return;
  health_->Run([this](const HealthVerdict& v) { OnHealthVerdict(v); });
}

void Agent::OnHealthVerdict(const HealthVerdict& v) {
  const std::string described =
      absl::StrCat("--health-check '", health_->command(), "' ", v.Describe());
  if (v.outcome == HealthVerdict::Outcome::kCannotRun) {
    LogError(described);
    Execute(state_.OnHealthAbandoned(kExitUsage, described));
    return;
  }
  if (v.passed()) {
    if (health_failures_ > 0 && Verbose()) LogInfo(described);
    health_failures_ = 0;
    health_failing_since_.reset();
    Execute(state_.OnHealthChecked(true, described));
    return;
  }
  const TimePoint now = std::chrono::steady_clock::now();
  ++health_failures_;
  if (!health_failing_since_.has_value()) health_failing_since_ = now;
  if (now - *health_failing_since_ >= health_give_up_after_) {
    const std::string why =
        absl::StrCat("the health check has failed for ", health_failures_, " tries in a row over ",
                     SecondsText(now - *health_failing_since_), " (join_timeout ",
                     SecondsText(health_give_up_after_), "); last: ", described);
    Execute(state_.OnHealthAbandoned(kExitRendezvous, why));  // Finish logs it, once
    return;
  }
  Execute(state_.OnHealthChecked(false, absl::StrCat("health check failed: ", described)));
  if (state_.phase() != AgentStateMachine::Phase::kSittingOut) return;
  const Duration delay = HealthRetryDelay(health_failures_);
  LogWarning(absl::StrCat(described, "; this node stays out of the run (",
                          joined_ ? "the others go on without it" : "not joined yet",
                          "), next try in ", SecondsText(delay)));
  loop_.AddTimerAfter(delay, [this] {
    if (state_.phase() == AgentStateMachine::Phase::kSittingOut) RunHealthCheck();
  });
}

void Agent::NoteHangNotice(const std::optional<rendezvous::HangNotice>& hang) {
  if (!hang.has_value() || hang->straggler.empty()) return;
  straggler_ = hang->straggler;
  LogWarning(absl::StrCat("straggler of the hang (lowest step, then oldest progress, all nodes): ",
                          straggler_));
}

void Agent::DrainKernelLog() {
  explainer_->Drain();
  explainer_->Watch(group_ ? group_->LivePids() : std::vector<pid_t>{});
  loop_.AddTimerAfter(std::chrono::seconds(1), [this] { DrainKernelLog(); });
}

void Agent::OnWorkerExited(const WorkerExit& reported) {
  WorkerExit exit = reported;
  if (exit.signal != 0 && exit.hang.empty() && explainer_ != nullptr) {
    auto micros = [](TimePoint t) {
      return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
    };
    WorkerDeath death;
    death.pid = exit.pid;
    death.signal = exit.signal;
    death.started_us = micros(exit.started);
    death.died_us = micros(exit.when);
    death.killed_by_agent = exit.signalled_by_agent;
    death.comm = exit.comm;
    exit.cause = explainer_->Explain(death);
  }
  if (exit.local_rank >= 0 && exit.local_rank < static_cast<int>(exits_.size())) {
    exits_[exit.local_rank] = exit;
  }
  hangs_.OnExited(exit.local_rank, exit.pid);
  if (reform_) reform_->OnWorkerExited(exit.local_rank);
  // Posted, not handled inline: the group that reports the exit may be replaced by the actions
  // that follow (a restart starts a new group).
  loop_.Post([this, exit] {
    if (stopping_ && group_ && group_->live() == 0) {
      stopping_ = false;
      RecordStep(StepEvent{Step::kStopFinished});
    }
    Execute(state_.OnWorkerExited(exit));
  });
}

void Agent::OnWorkerOutput(int local_rank, WorkerStream stream) {
  hangs_.OnOutput(local_rank);
  if (stream == WorkerStream::kStdout) progress_in_attempt_ = true;
  if (awaiting_first_progress_) {
    awaiting_first_progress_ = false;
    StepEvent first{Step::kFirstProgress};
    first.rank = current_.rank_offset + local_rank;
    first.round = current_.round;
    RecordStep(first);
    if (spares_) spares_->WorkersSettled();
  }
}

void Agent::OnStacksTaken() { RecordStep(StepEvent{Step::kStacksTaken}); }

void Agent::RecordStep(StepEvent event) {
  if (timeline_ == nullptr) return;
  event.when = std::chrono::steady_clock::now();
  event.unix_ms = UnixMillisNow();
  const std::string line = timeline_->Add(event);
  if (events_fd_ >= 0) WriteAll(events_fd_, absl::StrCat(line, "\n"));
  if (rendezvous_ != nullptr) rendezvous_->ReportStep(line);
  NoteInLedger(event);
  switch (event.step) {
    case Step::kFailureDetected:
      failure_in_cycle_ = true;
      break;
    case Step::kWorkersStarted:
      if (std::optional<std::string> cycle = timeline_->CycleLine()) LogInfo(*cycle);
      failure_in_cycle_ = false;
      awaiting_first_progress_ = true;
      progress_in_attempt_ = false;
      break;
    default:
      break;
  }
}

void Agent::OnHang(const HangVerdict& verdict) {
  if (!group_) return;
  WorkerExit hung;
  hung.local_rank = verdict.local_rank;
  hung.rank = current_.rank_offset + verdict.local_rank;
  hung.pid = group_->Pid(verdict.local_rank);
  hung.hang = verdict.Describe();
  hung.when = std::chrono::steady_clock::now();
  LogWarning(absl::StrCat("worker rank ", hung.rank, " (local rank ", hung.local_rank, ", pid ",
                          hung.pid, ") is hung: ", hung.hang));
  // The rendezvous must know every rank's progress before it names the straggler.
  ReportProgress(hangs_.Progress(), /*urgent=*/true);
  Execute(state_.OnHang(hung, verdict.signal));
}

void Agent::NoteInLedger(const StepEvent& e) {
  if (ledger_ == nullptr) return;
  switch (e.step) {
    case Step::kFailureDetected:
      ledger_->OnFailure(e.when, e.cause, std::nullopt);
      break;
    case Step::kStopFinished:
    case Step::kRoundAborted:
      ledger_->OnStopped(e.when);
      break;
    case Step::kRoundComplete:
      ledger_->OnRoundComplete(e.when, e.round);
      break;
    case Step::kWorkersStarted:
      ledger_->OnWorkersStarted(e.when, e.kept >= 0);
      break;
    case Step::kStateRestored:
      ledger_->OnStateRestored(e.when, e.state_step);
      break;
    default:
      break;
  }
}

void Agent::OnStepReport(int local_rank, int64_t step) {
  progress_in_attempt_ = true;
  if (ledger_ == nullptr) return;
  const TimePoint now = std::chrono::steady_clock::now();
  std::optional<RecoveryRecord> done = ledger_->OnStepReport(now, step);
  if (!done.has_value()) return;
  StepEvent recovered{Step::kRecovered};
  recovered.round = done->round;
  recovered.cause = done->cause;
  recovered.recovery = *done;
  recovered.effective_ratio = ledger_->EffectiveRatio(now);
  RecordStep(recovered);
  LogInfo(FormatRecovery(*done, *recovered.effective_ratio));
}

void Agent::ReportProgress(const std::vector<LocalProgress>& progress, bool urgent) {
  std::vector<rendezvous::RankProgress> out;
  out.reserve(progress.size());
  for (const LocalProgress& p : progress) {
    out.push_back({current_.rank_offset + p.local_rank, p.step, ToMillis(p.idle)});
  }
  rendezvous_->ReportProgress(out, urgent);
}

std::string Agent::StacksGlob() const {
  if (!group_ || attempt_ < 0) return "";
  for (int lr = 0; lr < options_.nproc_per_node; ++lr) {
    if (!group_->StacksPath(lr).empty()) {
      return absl::StrCat(log_root_, "/attempt_", attempt_, "/*/stacks.txt");
    }
  }
  return "";
}

void Agent::KillWhatWorkersLeft() {
  std::set<pid_t> ours = {guard_.pid()};
  if (spares_) {
    for (pid_t pid : spares_->OwnPids()) ours.insert(pid);
  }
  if (group_) {
    for (pid_t pid : group_->LivePids()) ours.insert(pid);  // in-process recovery's survivors
  }
  const std::vector<pid_t> killed = KillStrayChildren(ours);
  if (!killed.empty()) {
    LogWarning(absl::StrCat("killed ", killed.size(),
                            " process(es) the workers left running (detached with setsid or a "
                            "double fork, so outside their process groups): pid ",
                            absl::StrJoin(killed, ", ")));
  }
}

void Agent::ReapChildren() {
  while (true) {
    // Peek first: a zombie still has its name, which tells the kernel's records about this pid
    // from those about another process that had the same number (WorkerExit::comm).
    siginfo_t info{};
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid <= 0) return;
    const std::string comm(absl::StripTrailingAsciiWhitespace(
        ReadTextFile(absl::StrCat("/proc/", info.si_pid, "/comm"))));
    int status = 0;
    const pid_t pid = waitpid(info.si_pid, &status, WNOHANG);
    if (pid <= 0) return;
    // Not a worker: an orphaned grandchild adopted as subreaper (reaping it is all we owe), or
    // the orphan guard (which only exits early if killed).
    if (spares_ && spares_->HandleChildExit(pid, status)) continue;
    if (health_ && health_->HandleChildExit(pid, status)) continue;
    if (gpu_release_ && gpu_release_->HandleChildExit(pid, status)) continue;
    if (group_) group_->HandleChildExit(pid, status, comm);
  }
}

void Agent::OnSignals() {
  signalfd_siginfo info;
  while (read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) {
      ReapChildren();
    } else if (IsStopSignal(sig) && waiting_for_peers_) {
      loop_.Stop();  // done ourselves; stop serving the others at once
    } else if (IsStopSignal(sig)) {
      LogInfo(absl::StrCat("received ", SignalName(sig), "; stopping the workers"));
      Execute(state_.OnStopSignal(sig));
    } else {
      LogInfo(absl::StrCat("forwarding ", SignalName(sig), " to the workers"));
      if (group_) group_->Forward(sig);
    }
  }
}

}  // namespace ddprun::launcher
